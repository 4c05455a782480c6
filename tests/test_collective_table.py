"""The collective table is one: jax_plugin/spmd/collective_table.py is the
module ci/gen_collective_table.py writes from C++'s table; the handlers
registered for each engine are the table's; and every custom call the
rewrite emits, on real partitioned programs (the fuzz corpus) in each of
the compile's modes, names a target of the table with exactly its
attributes, each written as its type, and the operands and results its form
says; and docs/architecture.md describes the same targets and attributes."""
import glob
import importlib.util
import os
import re

import numpy as np
import pytest

from jax_plugin import _myplugin
from jax_plugin.spmd import collective_table as table
from jax_plugin.spmd import rewrite
from jax_plugin.spmd.hlo_text import HloTextError, lines_of, parse_instruction

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = sorted(glob.glob(os.path.join(ROOT, "fuzz", "corpus", "hlo_rewrite_fuzzer", "*")))
# A loop of collectives after a collective: the host engine's rewrite fences
# it (no program of the corpus has one).
LOOP = """HloModule jit_loop, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: f32[4,2]) -> pred[] {
  %c = f32[4,2]{1,0} parameter(0)
  ROOT %f = pred[] constant(false)
}

%body (b: f32[4,2]) -> f32[4,2] {
  %b = f32[4,2]{1,0} parameter(0)
  ROOT %s = f32[4,2]{1,0} all-reduce(%b), channel_id=2, replica_groups=[1,8]<=[8], use_global_device_ids=true, \
to_apply=%add
}

ENTRY %main (p: f32[4,2]) -> f32[4,2] {
  %p = f32[4,2]{1,0} parameter(0)
  %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add
  ROOT %w = f32[4,2]{1,0} while(%r), condition=%cond, body=%body
}
"""
BY_NAME = {t.name: t for t in table.TARGETS}

# How each attribute type is written in backend_config (an independent
# reading of the MLIR attribute syntax the engine's parser takes).
VALUE = {
    "str": r'"[^"]*"',
    "i64": r"-?[0-9]+ : i64",
    "i64[]": r"dense<\[(?:-?[0-9]+(?:, -?[0-9]+)*)?\]> : tensor<[0-9]+xi64>",
}


def generator():
  spec = importlib.util.spec_from_file_location("gen_collective_table",
                                                os.path.join(ROOT, "ci", "gen_collective_table.py"))
  gen = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(gen)
  return gen


def test_the_module_is_the_one_the_cpp_table_writes():
  with open(os.path.join(ROOT, "jax_plugin", "spmd", "collective_table.py")) as f:
    assert f.read() == generator().render(_myplugin.collective_table()), \
        "jax_plugin/spmd/collective_table.py is stale: run python ci/gen_collective_table.py"


def test_the_installed_module_is_the_checkouts():
  """The rewrite that runs (installed) reads the same table."""
  with open(os.path.join(ROOT, "jax_plugin", "spmd", "collective_table.py")) as f, open(table.__file__) as g:
    assert f.read() == g.read()


def test_each_engine_registers_the_tables_targets():
  assert sorted(_myplugin.ffi_targets()) == sorted(t.name for t in table.TARGETS if "cpu" in t.engines)
  nccl = _myplugin.nccl_ffi_targets()
  if nccl is not None:
    assert sorted(nccl) == sorted(t.name for t in table.TARGETS if "cuda" in t.engines)


def test_the_rewrites_choices_agree_with_the_table():
  assert set(rewrite._REDUCTIONS.values()) <= set(table.REDUCTIONS)
  for op, target in rewrite._COMBINABLE.items():
    assert target.replaces == op and target.operands == "any_number" and target.results == "one_per_operand"


def attributes(config: str) -> dict:
  """backend_config={k = v, ...} as {k: v}, each v of one of the VALUE forms."""
  body = config.removeprefix("{").removesuffix("}")
  item = re.compile(r"(\w+) = (" + "|".join(VALUE.values()) + r")(?:, |$)")
  out, pos = {}, 0
  while pos < len(body):
    m = item.match(body, pos)
    assert m, f"backend_config={config}: no attribute at {body[pos:]!r}"
    assert m.group(1) not in out, config
    out[m.group(1)] = m.group(2)
    pos = m.end()
  return out


def check_call(inst, opcodes: set[str]) -> str:
  target = BY_NAME.get((inst.attr("custom_call_target") or "").strip('"'))
  assert target is not None, f"{inst.line()}: a target the table does not have"
  assert inst.attr("api_version") == "API_VERSION_TYPED_FFI", inst.line()
  found = attributes(inst.attr("backend_config") or "{}")
  assert sorted(found) == sorted(a.key for a in target.attributes), inst.line()
  for a in target.attributes:
    assert re.fullmatch(VALUE[a.type], found[a.key]), f"{a.key} is not {a.type}: {inst.line()}"
    if a.type == "i64[]":
      values = re.search(r"\[(.*)\]", found[a.key]).group(1)
      assert int(re.search(r"<([0-9]+)xi64>", found[a.key]).group(1)) == len(values.split(",") if values else [])
  if target.replaces:
    # A reduce-scatter may also be formed from an all-reduce and each device's slice (reduce_scatter.py).
    formed = target.replaces == "reduce-scatter" and {"all-reduce", "dynamic-slice"} <= opcodes
    # And an all-to-all of each device's (output offset, size) pairs before a ragged all-to-all.
    formed |= target.replaces == "all-to-all" and "ragged-all-to-all" in opcodes
    assert target.replaces in opcodes or formed, f"{target.name} in a program without {target.replaces}"
  results = inst.shape if isinstance(inst.shape, list) else [inst.shape]
  if target.operands == "none":
    assert not inst.operands and len(results) == 1, inst.line()
  elif target.operands == "one":
    assert inst.operands and not isinstance(inst.shape, list), inst.line()
  elif target.operands == "ragged":
    assert len(inst.operands) >= 6 and not isinstance(inst.shape, list), inst.line()
  else:
    assert 1 <= len(results) <= len(inst.operands), inst.line()
  if target.results == "aliased":
    assert inst.attr("output_to_operand_aliasing") == "{{}: (0, {})}", inst.line()
  return target.name


def programs():
  yield LOOP
  for path in CORPUS:
    with open(path, encoding="utf-8", errors="replace") as f:
      yield f.read()


# The compile's modes (compile_hooks.local_program): the host engine's
# (fences, runtime device ids, buckets), a CUDA engine's (runtime device ids,
# buckets, each call on the collective stream, no fences), and the defaults.
MODES = {
    "host": dict(runtime_device_ids=True, combine_threshold=1 << 20),
    "cuda": dict(fences=False, runtime_device_ids=True, streams=True, combine_threshold=1 << 20,
                 widen_narrow_sums=False, engine="cuda"),
    "plain": dict(),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_call_the_rewrite_emits_is_the_tables(mode):
  emitted, rewritten = set(), 0
  for text in programs():
    header = text.split("\n", 1)[0]
    counts = [int(m.group(1)) if (m := re.search(rf"\b{k}=([0-9]+)", header)) else 1
              for k in ("replica_count", "num_partitions")]
    devices = counts[0] * counts[1]
    assignment = np.arange(devices)[::-1].reshape(counts).tolist()
    try:
      out = rewrite.rewrite_module(text, assignment, devices, **MODES[mode])
    except HloTextError:
      continue
    rewritten += 1
    opcodes = {i.opcode for i in map(parse_instruction, lines_of(text)) if i is not None}
    for inst in map(parse_instruction, lines_of(out)):
      if inst is not None and inst.opcode == "custom-call" and '"myplugin_' in (inst.attr("custom_call_target") or ""):
        emitted.add(check_call(inst, opcodes))
  assert rewritten >= 10
  if mode == "cuda":
    assert all("cuda" in BY_NAME[n].engines for n in emitted), emitted
  # The corpus reaches every target the mode emits, so no row goes unchecked.
  wanted = {t.name for t in table.TARGETS if ("cuda" if mode == "cuda" else "cpu") in t.engines}
  if mode == "plain":
    wanted -= {table.PARTITION_ID.name, table.REPLICA_ID.name}
  assert emitted == wanted, sorted(wanted - emitted)


def test_the_documented_table_is_the_cpp_one():
  """docs/architecture.md's table of targets (Collectives) names every target
  with its attributes (`function`, which every collective carries, is in the
  text above it)."""
  with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
    rows = [line for line in f if line.startswith("| `myplugin_")]
  keys = {a.key for t in table.TARGETS for a in t.attributes} - {table.FUNCTION.key}
  for t in table.TARGETS:
    row = next((r for r in rows if f"`{t.name}`" in r.split("|")[1]), None)
    assert row is not None, f"docs/architecture.md does not describe {t.name}"
    documented = set(re.findall(r"`(\w+)`", row.split("|")[3])) & keys
    assert documented == {a.key for a in t.attributes} - {table.FUNCTION.key}, (t.name, row)
  assert len(rows) == len({t.name for t in table.TARGETS}) - 1  # partition-id and replica-id share a row

"""The HLO rewrite of the multi-process compile, on hand-written modules:
replica-group forms, collective modes, device ids, transposes, the order
chain, and what it refuses. Every rewritten module must parse with jaxlib's
own HLO parser."""
import re

import pytest

from jax_plugin.spmd import replica_groups as rg
from jax_plugin.spmd.hlo_text import HloTextError, parse_instruction
from jax_plugin.spmd.rewrite import UnsupportedProgram, rewrite_module

ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""
MAX = ADD.replace("%add ", "%max ").replace("add(%a, %b)", "maximum(%a, %b)")


def module(body: str, params="p: f32[4,2]", comps=ADD, header="num_partitions=8") -> str:
  return f"HloModule m, {header}\n\n{comps}\nENTRY %main {{\n{body}\n}}\n"


def parses(text: str) -> None:
  from jax._src.lib import hlo
  hlo.hlo_module_from_text(text)


def entry_lines(text: str) -> list[str]:
  lines = text.splitlines()
  return [l.strip() for l in lines[next(i for i, l in enumerate(lines) if l.startswith("ENTRY")) + 1:]]


def attr_ids(line: str, name: str) -> list[int]:
  m = re.search(name + r" = dense<\[([0-9, -]*)\]>", line)
  assert m, line
  return [int(v) for v in m.group(1).split(",")]


def test_replica_group_forms():
  assert rg.parse("{}") is None
  assert rg.parse("{{0,1},{2,3}}") == [[0, 1], [2, 3]]
  assert rg.parse("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert rg.parse("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
  assert rg.parse("mesh['x'=2,'y'=4] {'x'}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
  assert rg.parse("mesh['x'=2,'y'=4] {'y'}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert rg.parse("mesh['x'=2,'y'=2,'z'=2] {'z','x'}") == [[0, 4, 1, 5], [2, 6, 3, 7]]
  assert rg.parse_pairs("{{0,1},{1,0}}") == [(0, 1), (1, 0)]
  with pytest.raises(HloTextError):
    rg.parse("[2,4]<=garbage")
  with pytest.raises(HloTextError):
    rg.parse("mesh['x'=2] {'q'}")


def test_instruction_lines():
  inst = parse_instruction('  ROOT %t = (f32[2]{0}, s32[]) tuple(%a, %b), metadata={op_name="x, y"}')
  assert (inst.root, inst.name, inst.opcode, inst.operands) == (True, "%t", "tuple", ["%a", "%b"])
  assert inst.attr("metadata") == '{op_name="x, y"}'
  const = parse_instruction("  %c = s32[3]{0} constant({1, 2, 3})")
  assert const.operands == ["{1, 2, 3}"]
  assert parse_instruction("HloModule m, num_partitions=8") is None


def test_all_reduce_in_flattened_ids_maps_through_the_assignment():
  text = module("  %p = f32[4,2]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}\n"
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, replica_groups=[2,4]<=[8], "
                "use_global_device_ids=true, to_apply=%max", comps=MAX)
  assignment = [[3, 2, 1, 0, 7, 6, 5, 4]]  # one replica, 8 partitions, devices in another order
  out = rewrite_module(text, assignment, 8)
  parses(out)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert 'custom_call_target="myplugin_all_reduce"' in line and 'reduction = "max"' in line
  assert attr_ids(line, "replica_groups") == [3, 2, 1, 0, 7, 6, 5, 4]
  assert "group_size = 4 : i64" in line
  assert "sharding=" not in out and "num_partitions" not in out


def test_cross_replica_groups_of_a_pmap():
  text = module("  %p = f32[4]{0} parameter(0)\n"
                "  ROOT %r = f32[4]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add",
                params="p: f32[4]", header="replica_count=4")
  out = rewrite_module(text, [[10], [11], [12], [13]], 16)
  parses(out)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert attr_ids(line, "replica_groups") == [10, 11, 12, 13] and "group_size = 2 : i64" in line


def test_gather_along_a_later_dimension_is_transposed_there_and_back():
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n"
                "  ROOT %g = f32[4,8]{1,0} all-gather(%p), channel_id=1, replica_groups=[2,4]<=[8], "
                "dimensions={1}, use_global_device_ids=true")
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  lines = [l for l in entry_lines(out) if "myplugin" in l or "ROOT" in l]
  assert "transpose(%p), dimensions={1,0}" in lines[0]
  assert lines[1].split(" = ")[1].startswith("f32[8,4]{1,0} custom-call")
  assert lines[2].startswith("ROOT %g = f32[4,8]{1,0} transpose(") and lines[2].endswith("dimensions={1,0}")


def test_collectives_are_chained_in_program_order():
  text = module("  %p = f32[4]{0} parameter(0)\n"
                "  %a = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
                "to_apply=%add\n"
                "  %q = f32[4]{0} negate(%p)\n"
                "  ROOT %b = f32[4]{0} all-reduce(%q), channel_id=2, replica_groups={}, use_global_device_ids=true, "
                "to_apply=%add", params="p: f32[4]")
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  b = next(l for l in entry_lines(out) if l.startswith("ROOT"))
  assert "custom-call(%q, %a)" in b  # b also reads a's result: it runs after a


def test_partition_and_replica_ids_look_up_the_local_replica():
  """The local program's replica r runs global device local_order[r]: the
  global program's ids come from a table indexed by the local replica id."""
  text = module("  %p = f32[] parameter(0)\n  ROOT %i = u32[] partition-id()", params="p: f32[]")
  out = rewrite_module(text, [[5, 4, 7, 6]], 8, local_order=[7, 6])
  parses(out)
  lines = entry_lines(out)
  assert any("replica-id()" in l for l in lines)
  assert any("u32[2]{0} constant({2, 3})" in l for l in lines), out
  assert lines[-2].startswith("ROOT %i = u32[] reshape(")
  pmap = module("  %p = f32[] parameter(0)\n  ROOT %i = u32[] replica-id()", params="p: f32[]")
  out = rewrite_module(pmap, [[3], [2], [1], [0]], 4, local_order=[1, 0])
  parses(out)
  assert any("u32[2]{0} constant({2, 3})" in l for l in entry_lines(out)), out


@pytest.mark.parametrize("body,what", [
    ("  ROOT %r = f32[4]{0} collective-broadcast(%p), replica_groups={}", "collective-broadcast"),
    ("  ROOT %r = (f32[4]{0}, f32[4]{0}) all-to-all(%p, %p), channel_id=1, replica_groups={{0,1}}", "tuple form"),
    ("  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
     "to_apply=%sub", "reduces with subtract"),
])
def test_what_cannot_run_across_processes_is_refused(body, what):
  sub = ADD.replace("%add ", "%sub ").replace("add(%a, %b)", "subtract(%a, %b)")
  text = module("  %p = f32[4]{0} parameter(0)\n" + body, params="p: f32[4]", comps=ADD + sub)
  with pytest.raises(UnsupportedProgram, match=what):
    rewrite_module(text, [[0, 1]], 2)


def test_tuple_element_operand_of_a_collective():
  """Newer XLA prints a one-result custom call's output used directly as
  `%t#0` (a pure_callback before a psum): the collective's operand shape is
  that tuple element."""
  text = module("""  %p = f32[4,2]{1,0} parameter(0)
  %cb = (f32[4,2]{1,0}) custom-call(%p), custom_call_target="xla_ffi_python_cpu_callback", api_version=API_VERSION_TYPED_FFI, backend_config={callback_id = 1 : ui64}
  ROOT %r = f32[4,2]{1,0} all-reduce(%cb#0), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add""")
  out = rewrite_module(text, [list(range(8))], 8)
  lines = entry_lines(out)
  assert any("xla_ffi_python_cpu_callback" in l and "callback_id = 1" in l for l in lines)
  call = next(l for l in lines if "myplugin_all_reduce" in l)
  assert "custom-call(%cb#0)" in call and "operand_layout_constraints={f32[4,2]{1,0}}" in call

"""The programs of the GPU compile matrix (ci/gpu_compile_matrix.sh,
tests/test_gpu_compile.py), compiled without a GPU, and the collectives in
what comes out.

The programs are those of examples/shard_map_collectives.py (every
collective on a 1-D mesh and on either axis of a 2-D one, a loop that
communicates) and examples/train_mlp.py (a data-parallel training step: the
partitioner inserts the gradients' all-reduces), imported from there, an
auto-partitioned model-parallel layer, the
single-device programs of tests/gpu (numerics.py's sin, log, erf, pow:
libdevice; bf16 and f32 matmuls; scan, vmap, grad, random, f16), a
custom_partitioning op over the mesh (its rule keeps the rows' sharding; the
sum after it is the partitioner's all-reduce) and a Pallas kernel in a
shard_map (Triton for the GPUs; interpret mode on jax's CPU backend, which
compiles no other: the collectives around it are the same).

  python gpu_compile_programs.py myplugin --gpu h100 --topology 1x2x2 --out ours.json
  python gpu_compile_programs.py reference --devices 4 --out ref.json   # jax's CPU backend

Each writes {program: {"collectives": [...], ...}}. A collective is
[kind, reduction, device groups (global ids), operand dtype, sorted operand
dims]: for myplugin read from our custom calls in the compiled program
(as_text), for the reference from XLA's own module right after SPMD
partitioning on jax's CPU backend (the same programs, the same devices).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time


def _example(name: str):
  """examples/<name>.py as a module (its programs, without running it)."""
  import importlib.util
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", name + ".py")
  spec = importlib.util.spec_from_file_location(f"example_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# A row-wise softmax whose custom partitioning rule keeps the rows'
# sharding and computes each shard alone.
def _softmax(x):
  import jax
  return jax.nn.softmax(x, axis=-1)


def _rows(mesh):
  from jax.sharding import NamedSharding, PartitionSpec as P
  return NamedSharding(mesh, P(mesh.axis_names[0], None))


def _infer_rows(mesh, arg_shapes, result_shape):
  return _rows(mesh)


def _partition_rows(mesh, arg_shapes, result_shape):
  return mesh, _softmax, _rows(mesh), (_rows(mesh),)


def _custom_partitioned_softmax():
  from jax.experimental.custom_partitioning import custom_partitioning
  softmax = custom_partitioning(_softmax)
  softmax.def_partition(infer_sharding_from_operands=_infer_rows, partition=_partition_rows,
                        sharding_rule="i j -> i j")
  return softmax


def _pallas_scale(interpret: bool):
  import jax
  import jax.numpy as jnp
  from jax.experimental import pallas as pl

  def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + jnp.sin(x_ref[...])

  return lambda v: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype), interpret=interpret)(v)


def catalogue(devices, gpu: bool = True):
  """name -> (jitted function, its arguments as ShapeDtypeStructs); `gpu`:
  for a GPU target (Pallas kernels compiled, not interpreted)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  devices = sorted(devices, key=lambda d: d.id)
  n = len(devices)
  line = Mesh(np.array(devices), ("i",))
  grid = Mesh(np.array(devices).reshape(2, n // 2), ("a", "b"))
  f32 = jnp.float32
  x = jax.ShapeDtypeStruct((n, 2 * n), f32, sharding=NamedSharding(line, P("i")))
  xg = jax.ShapeDtypeStruct((n, 2 * n), f32, sharding=NamedSharding(grid, P("a", "b")))
  shard_map_collectives, train_mlp = _example("shard_map_collectives"), _example("train_mlp")
  out = {}
  for name, fn in shard_map_collectives.line_collectives(n).items():
    out[name] = (jax.jit(jax.shard_map(fn, mesh=line, in_specs=P("i"), out_specs=P("i"))), (x,))
  for name, fn in shard_map_collectives.GRID_COLLECTIVES.items():
    out[name] = (jax.jit(jax.shard_map(fn, mesh=grid, in_specs=P("a", "b"), out_specs=P("a", "b"))), (xg,))
  out["loop"] = (shard_map_collectives.looped(line), (x,))

  # examples/train_mlp.py's step: parameters replicated, the batch split.
  hidden = 64
  rep = NamedSharding(line, P())
  params = {"w1": jax.ShapeDtypeStruct((16, hidden), f32, sharding=rep),
            "b1": jax.ShapeDtypeStruct((hidden,), f32, sharding=rep),
            "w2": jax.ShapeDtypeStruct((hidden, 4), f32, sharding=rep),
            "b2": jax.ShapeDtypeStruct((4,), f32, sharding=rep)}
  batch = NamedSharding(line, P("i"))
  xs = jax.ShapeDtypeStruct((8 * n, 16), f32, sharding=batch)
  ys = jax.ShapeDtypeStruct((8 * n, 4), f32, sharding=batch)
  out["train_step"] = (train_mlp.step, (params, xs, ys))

  # A layer split across devices by its weight's columns: the partitioner
  # gathers what the next op needs.
  w = jax.ShapeDtypeStruct((32, 8 * n), f32, sharding=NamedSharding(line, P(None, "i")))
  a = jax.ShapeDtypeStruct((16, 32), f32, sharding=NamedSharding(line, P()))
  out["model_parallel"] = (jax.jit(lambda a, w: jnp.tanh(a @ w).sum(axis=1),
                                   out_shardings=NamedSharding(line, P())), (a, w))

  # tests/gpu/numerics.py's arithmetic, on one device.
  one = NamedSharding(Mesh(np.array(devices[:1]), ("d",)), P())
  v = jax.ShapeDtypeStruct((256,), f32, sharding=one)
  m = jax.ShapeDtypeStruct((128, 128), jnp.bfloat16, sharding=one)
  mf = jax.ShapeDtypeStruct((128, 128), f32, sharding=one)
  out["numerics"] = (jax.jit(lambda v, m, mf: (jnp.sin(v) + jnp.log1p(jnp.abs(v)) + jax.lax.erf(v) +
                                               jnp.power(jnp.abs(v) + 1, 1.5), m @ m, mf @ mf)), (v, m, mf))
  # tests/gpu/test_gpu_single.py's control flow and transformations: scan,
  # vmap, grad, random bits, f16.
  def control(v, mf):
    noise = jax.random.normal(jax.random.key(0), v.shape)
    total, running = jax.lax.scan(lambda c, e: (c + e, c * e), 0.0, v + noise)
    rows = jax.vmap(jnp.dot)(mf, mf)
    slope = jax.grad(lambda w: jnp.sum(jnp.tanh(w * v)))(1.5)
    return total, running.astype(jnp.float16), rows, slope
  out["control"] = (jax.jit(control), (v, mf))

  rows = jax.ShapeDtypeStruct((8 * n, 128), f32, sharding=NamedSharding(line, P("i")))
  softmax = _custom_partitioned_softmax()
  out["custom_partitioning"] = (jax.jit(lambda r: softmax(r).sum(axis=0), out_shardings=NamedSharding(line, P())),
                                (rows,))
  scale = _pallas_scale(interpret=not gpu)
  # (A kernel's output carries no varying-axes type: jax asks for check_vma=False.)
  out["pallas"] = (jax.jit(jax.shard_map(lambda r: jax.lax.psum(scale(r), "i"), mesh=line, in_specs=P("i"),
                                         out_specs=P(), check_vma=False)), (rows,))
  return out


_OURS = re.compile(r'custom_call_target="myplugin_(all_reduce|all_gather|reduce_scatter|all_to_all|'
                   r'collective_permute)"')
_KINDS = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
          "all_to_all": "all-to-all", "collective_permute": "collective-permute"}


def _ints(text: str | None) -> list[int]:
  return [int(v) for v in re.findall(r"-?\d+", text or "")]


def _config_field(line: str, key: str) -> str | None:
  m = re.search(key + r' = (dense<\[[^\]]*\]>|"[^"]*"|\d+)', line)
  if m is None:
    return None
  value = m.group(1)
  return value[value.index("[") + 1:value.index("]")] if value.startswith("dense") else value.strip('"')


def _data_operands(line: str) -> list:
  """The shapes of a call's data operands: its first layout constraints, one
  per result (a combined call returns a tuple, one element per operand;
  a trailing operand that only orders the call is not data)."""
  from jax_plugin.spmd.hlo_text import parse_shape, split_top_level
  constraints = re.search(r"operand_layout_constraints=\{(.*?)\}(?:, \w+=|$)", line)
  result = re.search(r"= (\([^=]*\)|\S+) custom-call\(", line)
  if constraints is None or result is None:
    return [None]
  shapes = [re.sub(r"\{[^}]*\}$", "", c) for c in split_top_level(constraints.group(1))]
  count = len(split_top_level(result.group(1)[1:-1])) if result.group(1).startswith("(") else 1
  return [parse_shape(shape) for shape in shapes[:count]]


def our_collectives(text: str) -> list:
  """Our NCCL custom calls in a compiled program's text, a combined call
  counted once per operand (as XLA's partitioner writes them, one each)."""
  found = []
  for line in text.splitlines():
    m = _OURS.search(line)
    if m is None:
      continue
    kind = _KINDS[m.group(1)]
    for shape in _data_operands(line):
      found.append(_our_collective(line, kind, shape))
  return sorted(found, key=json.dumps)


def _our_collective(line: str, kind: str, shape) -> list:
  if kind == "collective-permute":
    group = _ints(_config_field(line, "device_group"))
    pairs = _ints(_config_field(line, "pairs"))
    groups = sorted([group[s], group[t]] for s, t in zip(pairs[::2], pairs[1::2]))
    reduction = None
  else:
    flat = _ints(_config_field(line, "replica_groups"))
    size = int(_config_field(line, "group_size"))
    groups = sorted(sorted(flat[i:i + size]) for i in range(0, len(flat), size))
    reduction = _config_field(line, "reduction")
  return [kind, reduction, groups, shape.dtype if shape else None, sorted(shape.dims) if shape else None]


def reference_collectives(text: str, assignment) -> list:
  """The collectives in XLA's module right after SPMD partitioning."""
  import numpy as np
  from jax_plugin.spmd.collective_modes import device_groups
  from jax_plugin.spmd.hlo_text import computations, lines_of, parse_instruction, parse_shape
  from jax_plugin.spmd.replica_groups import parse_pairs
  from jax_plugin.spmd.rewrite import _REDUCTIONS

  lines = lines_of(text)
  comps = computations(lines)
  da = np.asarray(assignment, dtype=np.int64).reshape(1, -1)
  insts = [i for i in map(parse_instruction, lines) if i is not None]
  shapes = {i.name: i.shape_text for i in insts}
  for line in lines:  # a computation's parameters, named in its header
    if line.rstrip().endswith("{") and " -> " in line:
      shapes.update(("%" + n, t) for n, t in re.findall(r"([\w.#-]+): (\w+\[[^\]]*\])", line))
  found = []
  for inst in insts:
    if inst.opcode not in _KINDS.values():
      continue
    operand = inst.operands[0].split()[-1] if inst.operands else ""
    shape = parse_shape(shapes[operand]) if operand in shapes else None
    if shape is None and inst.opcode in ("all-reduce", "collective-permute"):
      shape = inst.shape  # the same as the operand's
    if inst.opcode == "collective-permute":
      ids = da[0, :]
      groups = sorted([int(ids[s]), int(ids[t])] for s, t in parse_pairs(inst.attr("source_target_pairs")))
      reduction = None
    else:
      groups = sorted(sorted(int(d) for d in g) for g in device_groups(inst, da))
      reduction = None
      if inst.opcode in ("all-reduce", "reduce-scatter"):
        comp = comps.get(inst.attr("to_apply") or "")
        reduction = _REDUCTIONS.get((comp.reducer or "") if comp else "")
    found.append([inst.opcode, reduction, groups, shape.dtype if shape else None,
                  sorted(shape.dims) if shape else None])
  return sorted(found, key=json.dumps)


def _analyses(compiled) -> dict:
  memory = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  if isinstance(cost, list):
    cost = cost[0] if cost else {}
  return {"temp_bytes": int(getattr(memory, "temp_size_in_bytes", -1)),
          "argument_bytes": int(getattr(memory, "argument_size_in_bytes", -1)),
          "flops": float((cost or {}).get("flops", -1.0))}


def compile_myplugin(gpu: str, topology: str, names: list[str] | None, serialize_dir: str | None) -> dict:
  import jax
  from jax.experimental import topologies
  topo = topologies.get_topology_desc(platform="myplugin", topology=topology, gpu=gpu)
  report = {}
  for name, (fn, args) in catalogue(topo.devices).items():
    if names and name not in names:
      continue
    start = time.perf_counter()
    compiled = fn.lower(*args).compile()
    seconds = time.perf_counter() - start
    text = compiled.as_text()
    entry = {"seconds": round(seconds, 3), "collectives": our_collectives(text),
             "calls": sum(1 for line in text.splitlines() if _OURS.search(line)),
             "xla_collectives": sorted(set(re.findall(r"= \S+ (all-reduce|all-gather|reduce-scatter|all-to-all|"
                                                      r"collective-permute)(?:-start)?\(", text))),
             **_analyses(compiled)}
    if serialize_dir:
      from jax.experimental.serialize_executable import serialize
      try:
        blob, _, _ = serialize(compiled)
      except AttributeError as e:  # jax pickles its custom_partitioning rule's closures: on every backend
        entry["unserializable"] = str(e)
      else:
        path = os.path.join(serialize_dir, f"{name}.bin")
        with open(path, "wb") as f:
          f.write(blob)
        entry["serialized_bytes"] = len(blob)
    report[name] = entry
    print(f"{gpu} {topology} {name}: {seconds:.2f} s, {len(entry['collectives'])} collectives", flush=True)
  del jax
  return report


def compile_reference(num_devices: int, names: list[str] | None) -> dict:
  import jax
  report = {}
  for name, (fn, args) in catalogue(jax.devices()[:num_devices], gpu=False).items():
    if names and name not in names:
      continue
    with tempfile.TemporaryDirectory() as dump:
      fn.lower(*args).compile(compiler_options={"xla_dump_to": dump, "xla_dump_hlo_pass_re": "spmd-partitioning"})
      after = sorted(glob.glob(os.path.join(dump, "*after_spmd-partitioning*.txt")))
      text = open(after[-1]).read() if after else ""
    first = jax.tree.leaves(args)[0].sharding
    assignment = [d.id for d in first._device_assignment] if len(first.device_set) > 1 else [0]
    report[name] = {"collectives": reference_collectives(text, assignment) if text else []}
  return report


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("side", choices=["myplugin", "reference"])
  parser.add_argument("--gpu", default="h100")
  parser.add_argument("--topology", default="1x2x2")
  parser.add_argument("--devices", type=int, default=4)
  parser.add_argument("--programs", default="", help="comma-separated names (default: all)")
  parser.add_argument("--serialize-dir")
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  names = [p for p in args.programs.split(",") if p]
  if args.side == "myplugin":
    report = compile_myplugin(args.gpu, args.topology, names, args.serialize_dir)
  else:
    report = compile_reference(args.devices, names)
  with open(args.out, "w") as f:
    json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
  sys.exit(main())

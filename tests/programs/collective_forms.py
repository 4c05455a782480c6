"""A generator of collective programs as the partitioner writes them: every
collective jax offers inside shard_map, over 1-D to 3-D meshes, with every
axis manual or only some (the rest left to the partitioner, which puts
sharding constraints, copies and converts in the reduction bodies), in
every element type the collectives carry; gradients through them, a nested
shard_map and a pipeline-style loop. Knows nothing of myplugin: run it
under myplugin-run, or with JAX_PLATFORMS=cpu in the same process shape
(jax's CPU backend then meets its processes through Gloo) for the reference.

usage: python collective_forms.py OUT.npz   ({rank} in OUT is the process index)

Saves each case's result as process 0 sees it, gathered whole, as raw
bytes (compared bit for bit), and `refused` (the cases that raised, with
their first line: none are expected).
"""
import os
import sys

import jax

if os.environ.get("JAX_PLATFORMS") == "cpu":
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mu  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

DTYPES = ["bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int32"]


def data(dtype: str, shape, seed: int) -> np.ndarray:
  """Values that reach each type's range: integer sums overflow, float8 sums round."""
  rng = np.random.default_rng(seed)
  if dtype.startswith(("int", "uint")):
    info = np.iinfo(dtype)
    return rng.integers(info.min // 2, info.max, size=shape, dtype=np.int64).astype(dtype)
  np_dtype = getattr(ml_dtypes, dtype) if dtype in ("bfloat16",) or dtype.startswith("float8") else np.dtype(dtype)
  return (rng.standard_normal(shape) * 3).astype(np_dtype)


def whole(x) -> np.ndarray:
  return np.asarray(mu.process_allgather(x, tiled=True))


def place(a: np.ndarray, mesh, spec):
  return jax.make_array_from_callback(a.shape, NamedSharding(mesh, spec), lambda idx: a[idx])


# Each collective as a body over the manual axes `ax` (a tuple of names).
def _ppermute(v, ax):
  n = 1
  for a in ax:
    n *= jax.lax.axis_size(a)
  return jax.lax.ppermute(v, ax, [(i, (i + 1) % n) for i in range(n)])


BODIES = {
    "psum": lambda v, ax: jax.lax.psum(v, ax),
    "pmax": lambda v, ax: jax.lax.pmax(v, ax),
    "pmin": lambda v, ax: jax.lax.pmin(v, ax),
    "psum_scatter": lambda v, ax: jax.lax.psum_scatter(v, ax, scatter_dimension=0, tiled=True),
    "all_gather": lambda v, ax: jax.lax.all_gather(v, ax, axis=0, tiled=True),
    "ppermute": _ppermute,
    "all_to_all": lambda v, ax: jax.lax.all_to_all(v, ax, 0, 0, tiled=True),
}
# Out specs: which collectives leave their result varying over the manual axes.
VARYING = {"psum_scatter", "all_gather", "ppermute", "all_to_all"}

results: dict[str, np.ndarray] = {}
refused: list[str] = []


def case(name: str, fn):
  try:
    out = fn()
  except Exception as e:  # noqa: BLE001 (a refusal is a result to compare, with its message)
    refused.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return
  for i, leaf in enumerate(jax.tree.leaves(out)):
    a = whole(leaf) if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable else np.asarray(leaf)
    results[f"{name}.{i}"] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    results[f"{name}.{i}.dtype"] = np.array(str(a.dtype))


def collective(mesh, manual: tuple, op: str, dtype: str, seed: int):
  """`op` over the manual axes of `mesh`, the other axes left automatic
  (the array sharded over them too, so the partitioner has work)."""
  auto = tuple(a for a in mesh.axis_names if a not in manual)
  lead = manual if len(manual) > 1 else manual[0]
  a = data(dtype, (8 * mesh.size, 8), seed)
  # psum_scatter with the automatic axes sharding the data trips an
  # assertion in jax's shard_map itself: its data is split on the manual axes only.
  x = place(a, mesh, P(lead, auto if auto and op != "psum_scatter" else None))
  out_spec = P(lead) if op in VARYING else P()
  body = BODIES[op]
  f = jax.shard_map(lambda v: body(v, manual), mesh=mesh, in_specs=P(lead), out_specs=out_spec,
                    axis_names=set(manual))
  return jax.jit(f)(x)


# 1. Every collective in every type, over all four devices (one manual axis).
mesh1 = jax.make_mesh((4,), ("x",))
for k, dtype in enumerate(DTYPES):
  for op in BODIES:
    case(f"types/{op}/{dtype}", lambda: collective(mesh1, ("x",), op, dtype, 10 * k + 1))
# numpy's f16 sum over the four devices' blocks: the f32 sum rounded once.
f16 = data("float16", (8 * mesh1.size, 8), 10 * DTYPES.index("float16") + 1).astype(np.float32)
results["expected/types/psum/float16"] = f16.reshape(4, -1, 8).sum(0).astype(np.float16).view(np.uint8).reshape(-1)

# 2. Every collective over 2-D and 3-D meshes, every choice of manual axes.
MESHES = {"2x2": ((2, 2), ("x", "y")), "2x1x2": ((2, 1, 2), ("x", "y", "z")), "1x4": ((1, 4), ("x", "y"))}
for mname, (shape, names) in MESHES.items():
  mesh = jax.make_mesh(shape, names)
  choices = [(n,) for n in names] + ([names] if len(names) > 1 else [])
  if len(names) == 3:
    choices.append(("x", "z"))
  for manual in choices:
    for op in BODIES:
      for dtype in ("float32", "int32"):
        case(f"forms/{mname}/{'+'.join(manual)}/{op}/{dtype}",
             lambda: collective(mesh, manual, op, dtype, len(results)))

# A bf16 sum over some axes of a mesh: jax's CPU backend aborts compiling
# it (its all-reduce promotion clones the reduction body's root, a copy of
# the sum, as a binary op: a CHECK failure), so there the reference is
# numpy's: the f32 sum of the group's blocks, rounded once.
if os.environ.get("JAX_PLATFORMS") != "cpu":
  mesh2d = jax.make_mesh((2, 2), ("x", "y"))
  case("partial_bf16_psum", lambda: collective(mesh2d, ("x",), "psum", "bfloat16", 7))
  blocks = data("bfloat16", (8 * mesh2d.size, 8), 7).astype(np.float32).reshape(2, -1, 8)
  results["expected/partial_bf16_psum"] = blocks.sum(0).astype(ml_dtypes.bfloat16).view(np.uint8).reshape(-1)

# 3. Gradients through a partly manual shard_map: jax adds a psum of its
# own for the replicated input, with a sharding constraint in its body.
mesh2 = jax.make_mesh((2, 2), ("x", "y"))
xs = place(data("float32", (16, 4), 3), mesh2, P("x", "y"))
w0 = jnp.float32(1.5)


def loss_ppermute(w, v):
  f = jax.shard_map(lambda w, v: jnp.sum(_ppermute(v * w, ("x",))), mesh=mesh2, in_specs=(P(), P("x")),
                    out_specs=P(), axis_names={"x"}, check_vma=False)
  return f(w, v).sum()


def loss_pmean(w, v):
  f = jax.shard_map(lambda w, v: jax.lax.pmean(jnp.tanh(v * w), "x"), mesh=mesh2, in_specs=(P(), P("x")),
                    out_specs=P(), axis_names={"x"})
  return jnp.sum(f(w, v) ** 2)


case("grad/ppermute", lambda: jax.jit(jax.value_and_grad(loss_ppermute))(w0, xs))
case("grad/pmean", lambda: jax.jit(jax.value_and_grad(loss_pmean))(w0, xs))
if os.environ.get("JAX_PLATFORMS") != "cpu":
  # jax 0.12's CPU backend aborts on this one too (the same CHECK as below):
  # its reference is the f32 program's gradient, at bf16's precision.
  bw = place(data("bfloat16", (16, 4), 4), mesh2, P("x", "y"))
  case("grad/pmean/bf16", lambda: jax.jit(jax.grad(lambda w, v: loss_pmean(w, v.astype(jnp.float32)).astype(
      jnp.bfloat16)))(jnp.bfloat16(0.5), bw))
  results["expected/grad/pmean/bf16"] = np.asarray(jax.jit(jax.grad(
      lambda w, v: loss_pmean(w, v.astype(jnp.float32))))(jnp.float32(0.5), bw)).reshape(-1)


# 4. A nested shard_map: manual over x outside, then over y inside.
def nested(v):
  inner = jax.shard_map(lambda u: jax.lax.psum(u * 2.0, "y"), mesh=jax.sharding.get_abstract_mesh(),
                        in_specs=P(None, "y"),
                        out_specs=P(None, None), axis_names={"y"})
  return jax.lax.psum(inner(v), "x")


def run_nested():
  with jax.set_mesh(mesh2):
    return jax.jit(jax.shard_map(nested, mesh=mesh2, in_specs=P("x"), out_specs=P(), axis_names={"x"}))(xs)


case("nested", run_nested)


# 5. Pipeline stages over x (a ppermute loop), the y axis automatic.
def stages(w, v):
  def step(carry, _):
    h = jnp.tanh(carry @ w)
    return jax.lax.ppermute(h, "x", [(0, 1), (1, 0)]), jax.lax.psum(jnp.sum(h), "x")
  out, sums = jax.lax.scan(step, v, None, length=3)
  return out, sums


ws = place(data("float32", (4, 4), 5) / 4, mesh2, P())
case("pipeline", lambda: jax.jit(jax.shard_map(stages, mesh=mesh2, in_specs=(P(), P("x")),
                                                  out_specs=(P("x"), P()), axis_names={"x"},
                                                  check_vma=False))(ws, place(data("float32", (16, 4), 6), mesh2,
                                                                              P("x"))))

results["refused"] = np.array(refused if refused else [""])
np.savez(sys.argv[1].format(rank=jax.process_index()), **results)
print(f"process {jax.process_index()}: {len(results)} results, {len(refused)} refused", flush=True)
for r in refused:
  print("refused", r, flush=True)

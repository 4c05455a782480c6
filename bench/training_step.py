"""The data-parallel training steps that the multi-process benchmarks compile
and run (bench/multiprocess_worker.py, bench/compilation_cache_worker.py):
an MLP 256-512-1 with gelu, batch 4096 split over every device of `mesh`'s
axis "d", plain SGD; and a deeper one of 12 parameter arrays (`deep_*`)."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def loss_fn(p, x, y):
  h = jax.nn.gelu(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def sgd_step(loss):
  """One plain SGD step on `loss(params, x, y)`: (new params, loss)."""
  def step(p, x, y):
    value, grads = jax.value_and_grad(loss)(p, x, y)
    return jax.tree.map(lambda a, g: a - 0.01 * g, p, grads), value
  return step


step = sgd_step(loss_fn)


def inputs(mesh):
  """(params replicated, xs and ys sharded by batch) on `mesh`, the same on every process."""
  rng = np.random.default_rng(0)
  xb = rng.normal(size=(4096, 256)).astype(np.float32)
  yb = np.sin(xb[:, :1]).astype(np.float32)
  params = {"w1": (rng.normal(size=(256, 512)) / 16).astype(np.float32), "b1": np.zeros(512, np.float32),
            "w2": (rng.normal(size=(512, 1)) / 22).astype(np.float32), "b2": np.zeros(1, np.float32)}
  params = jax.device_put(params, NamedSharding(mesh, P()))
  batch = NamedSharding(mesh, P("d"))
  xs = jax.make_array_from_callback(xb.shape, batch, lambda i: xb[i])
  ys = jax.make_array_from_callback(yb.shape, batch, lambda i: yb[i])
  return params, xs, ys


# A deeper MLP for the collective-combining benchmark (bench/multiprocess.py
# --combine): 6 layers of 128, so 12 parameter arrays, each with a gradient
# all-reduce of its own unless the rewrite combines them. Other widths
# (bench/gpu_multiprocess.py) give 2 arrays per layer likewise.
DEEP = [64, 128, 128, 128, 128, 128, 1]


def deep_loss_fn(p, x, y):
  h = x
  layers = len(p) // 2
  for i in range(layers):
    h = h @ p[f"w{i}"] + p[f"b{i}"]
    if i < layers - 1:
      h = jax.nn.gelu(h)
  return jnp.mean((h - y) ** 2)


deep_step = sgd_step(deep_loss_fn)


def deep_inputs(mesh, batch=1024, widths=DEEP):
  """(params replicated, xs and ys sharded by batch) of the deep MLP of
  `widths` (input, hidden..., output) on `mesh`."""
  rng = np.random.default_rng(0)
  xb = rng.normal(size=(batch, widths[0])).astype(np.float32)
  yb = np.sin(xb[:, :widths[-1]]).astype(np.float32)
  params = {}
  for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
    params[f"w{i}"] = (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)
    params[f"b{i}"] = np.zeros(b, np.float32)
  params = jax.device_put(params, NamedSharding(mesh, P()))
  sharded = NamedSharding(mesh, P("d"))
  xs = jax.make_array_from_callback(xb.shape, sharded, lambda i: xb[i])
  ys = jax.make_array_from_callback(yb.shape, sharded, lambda i: yb[i])
  return params, xs, ys


# An FSDP step (issue 51's): every weight sharded by rows over the mesh's
# axis "d", gathered whole before use (with_sharding_constraint), the batch
# sharded too, SGD with the weights' own shardings out. The partitioner makes
# each gradient an all-reduce and a slice of this device's rows: a
# reduce-scatter once the rewrite forms it (jax_plugin/spmd/reduce_scatter.py).
def fsdp_loss_fn(ws, x, mesh, remat=False):
  whole = NamedSharding(mesh, P())

  def layer(h, w1, w2):
    w1 = jax.lax.with_sharding_constraint(w1, whole)
    w2 = jax.lax.with_sharding_constraint(w2, whole)
    return h + jnp.tanh(h @ w1) @ w2

  # remat: each layer's activations recomputed in the backward pass, its
  # weights gathered again there.
  layer = jax.checkpoint(layer) if remat else layer
  h = x
  for w1, w2 in ws:
    h = layer(h, w1, w2)
  return jnp.mean(h.astype(jnp.float32) ** 2)


def fsdp_step(mesh, layers, remat=False):
  """The jitted step: (weights, x) -> (new weights, loss)."""
  rows = NamedSharding(mesh, P("d", None))

  def step(ws, x):
    loss, grads = jax.value_and_grad(fsdp_loss_fn)(ws, x, mesh, remat)
    return jax.tree.map(lambda w, g: w - 0.05 * g.astype(w.dtype), ws, grads), loss

  return jax.jit(step, out_shardings=([(rows, rows)] * layers, NamedSharding(mesh, P())))


def fsdp_inputs(mesh, layers=2, d=256, f=1024, tokens=2048, dtype=np.float32):
  """(weights [(w1 D x F, w2 F x D)] sharded by rows, x tokens x D sharded by
  rows) on `mesh`, the same on every process."""
  rng = np.random.default_rng(0)
  rows = NamedSharding(mesh, P("d", None))
  put = lambda a: jax.make_array_from_callback(a.shape, rows, lambda i: a[i])  # noqa: E731
  ws = [(put((rng.normal(size=(d, f)) / np.sqrt(d)).astype(dtype)),
         put((rng.normal(size=(f, d)) / np.sqrt(f)).astype(dtype))) for _ in range(layers)]
  return ws, put(rng.normal(size=(tokens, d)).astype(dtype))

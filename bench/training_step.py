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

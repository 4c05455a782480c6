"""Pipeline-parallel training: a two-stage MLP, one stage per process.

Process 0 holds the first stage's parameters, process 1 the second's and
the loss. Each step, the activations go forward from process 0's device to
process 1's, and their gradient comes back, with jax.device_put; each
process computes and updates only its own stage. Run alone (one process,
any backend), both stages run on one device and no array moves: the same
losses.

  myplugin-run -n 2 --devices-per-process 1 -- python examples/pipeline_parallel.py
  JAX_PLATFORMS=cpu python examples/pipeline_parallel.py     # the same losses on one process
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

STEPS, BATCH, D_IN, D_HIDDEN, LR = 10, 64, 16, 64, 0.05

two_stages = jax.process_count() == 2
me = jax.process_index()
stage_device = [jax.local_devices(process_index=p)[0] for p in (0, 1)] if two_stages else [jax.devices()[0]] * 2
on = [SingleDeviceSharding(d) for d in stage_device]
mine = [p for p in (0, 1) if not two_stages or p == me]  # the stages this process runs


def placed(stage, value):
  """`value` on a stage's device; a process that runs another stage holds no data of it."""
  value = np.asarray(value)
  return jax.make_array_from_callback(value.shape, on[stage], lambda idx: value[idx], dtype=value.dtype)


rng = np.random.default_rng(0)
params = [
    {"w": rng.normal(size=(D_IN, D_HIDDEN)) / np.sqrt(D_IN), "b": np.zeros(D_HIDDEN)},
    {"w": rng.normal(size=(D_HIDDEN, D_HIDDEN)) / np.sqrt(D_HIDDEN), "b": np.zeros(D_HIDDEN),
     "out": rng.normal(size=(D_HIDDEN, 1)) / np.sqrt(D_HIDDEN)},
]
params = [{k: v.astype(np.float32) for k, v in p.items()} for p in params]
params = [jax.tree.map(lambda v, s=s: placed(s, v), p) for s, p in enumerate(params)]
true_w = rng.normal(size=(D_IN, 1)).astype(np.float32)


def stage0(p, x):
  return jnp.tanh(x @ p["w"] + p["b"])


def stage1_loss(p, h, y):
  pred = jnp.tanh(h @ p["w"] + p["b"]) @ p["out"]
  return jnp.mean((pred - y) ** 2)


@jax.jit
def forward0(p, x):
  return stage0(p, x)


@jax.jit
def backward0(p, x, grad_h):
  _, vjp = jax.vjp(stage0, p, x)
  g, _ = vjp(grad_h)
  return jax.tree.map(lambda v, gv: v - LR * gv, p, g)


@jax.jit
def step1(p, h, y):
  loss, (g, grad_h) = jax.value_and_grad(stage1_loss, argnums=(0, 1))(p, h, y)
  return loss, jax.tree.map(lambda v, gv: v - LR * gv, p, g), grad_h


def to_stage(stage, array, shape):
  """device_put onto `stage`'s device. Every process takes part; one that
  does not hold the array passes a stand-in of its shape (no data)."""
  if array is None:
    array = jax.make_array_from_callback(shape, on[1 - stage], lambda idx: np.zeros(shape, np.float32)[idx],
                                         dtype=np.float32)
  return jax.device_put(array, on[stage])


for step in range(STEPS):
  x = rng.normal(size=(BATCH, D_IN)).astype(np.float32)
  y = np.tanh(x @ true_w).astype(np.float32)
  xs, ys = placed(0, x), placed(1, y)
  h = forward0(params[0], xs) if 0 in mine else None
  h1 = to_stage(1, h, (BATCH, D_HIDDEN))  # activations forward
  grad_h = None
  if 1 in mine:
    loss, params[1], grad_h = step1(params[1], h1, ys)
    print(f"step {step} loss {float(loss):.6f}", flush=True)
  grad_h0 = to_stage(0, grad_h, (BATCH, D_HIDDEN))  # their gradient back
  if 0 in mine:
    params[0] = backward0(params[0], xs, grad_h0)
jax.block_until_ready(params)

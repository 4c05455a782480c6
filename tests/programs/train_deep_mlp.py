"""Data-parallel training of a 4-layer MLP (8 parameter arrays: a gradient
all-reduce each, and the loss's), batch over every device of every
process, parameters replicated. Prints `loss <value>` per step, and with
`--count` the number of all-reduce instructions in the compiled step
(jax's CPU backend: after XLA's all-reduce combiner).

  python train_deep_mlp.py [--steps N] [--count]
"""
import argparse
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--count", action="store_true")
args = parser.parse_args()

mesh = Mesh(np.array(jax.devices()), ("batch",))
rng = np.random.default_rng(0)
sizes = [16, 64, 64, 32, 1]
x = rng.normal(size=(256, sizes[0])).astype(np.float32)
y = (np.sin(x[:, :1] * 2) + x[:, 1:2] ** 2).astype(np.float32)
params = {}
for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
  params[f"w{i}"] = (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)
  params[f"b{i}"] = np.zeros(b, np.float32)
params = jax.device_put(params, NamedSharding(mesh, P()))
batch = NamedSharding(mesh, P("batch"))
x = jax.make_array_from_callback(x.shape, batch, lambda i: x[i])
y = jax.make_array_from_callback(y.shape, batch, lambda i: y[i])


def loss_fn(p, x, y):
  h = x
  for i in range(len(sizes) - 1):
    h = h @ p[f"w{i}"] + p[f"b{i}"]
    if i < len(sizes) - 2:
      h = jax.nn.gelu(h)
  return jnp.mean((h - y) ** 2)


@jax.jit
def step(p, x, y):
  loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
  return jax.tree.map(lambda a, g: a - 0.05 * g, p, grads), loss


if args.count:
  text = step.lower(params, x, y).compile().as_text()
  print("all-reduces", len(re.findall(r" all-reduce(?:-start)?\(", text)))
for i in range(args.steps):
  params, loss = step(params, x, y)
  print(f"step {i:3d}  loss {float(loss):.7f}", flush=True)

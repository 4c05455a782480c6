"""The tensor-parallel training step that bench/multiprocess.py runs: an MLP
layer 1024-4096-1024 on a 2-D mesh ("data", "model"), Megatron style: the
batch split over "data", the first weight's columns and the second's rows
over "model", so each step all-reduces activations and gradients over
"model" and gradients over "data"; plain SGD."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import training_step


def mesh_2d(devices):
  """("data", "model"): two model shards when there are four or more devices."""
  n = len(devices)
  model = 2 if n >= 4 else n
  return Mesh(np.array(devices).reshape(n // model, model), ("data", "model"))


def loss_fn(p, x, y):
  h = jax.nn.gelu(x @ p["w1"])
  return jnp.mean((h @ p["w2"] - y) ** 2)


step = training_step.sgd_step(loss_fn)


def inputs(mesh):
  """(params split over "model", x and y split over "data"), the same on every process."""
  rng = np.random.default_rng(0)
  xb = rng.normal(size=(512, 1024)).astype(np.float32)
  yb = np.tanh(xb).astype(np.float32)
  w = {"w1": (rng.normal(size=(1024, 4096)) / 32).astype(np.float32),
       "w2": (rng.normal(size=(4096, 1024)) / 64).astype(np.float32)}
  specs = {"w1": P(None, "model"), "w2": P("model", None)}
  params = {k: jax.make_array_from_callback(v.shape, NamedSharding(mesh, specs[k]), lambda i, v=v: v[i])
            for k, v in w.items()}
  batch = NamedSharding(mesh, P("data", None))
  xs = jax.make_array_from_callback(xb.shape, batch, lambda i: xb[i])
  ys = jax.make_array_from_callback(yb.shape, batch, lambda i: yb[i])
  return params, xs, ys

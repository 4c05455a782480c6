"""A flax.nnx + optax data-parallel training run, unchanged: the batch is
sharded over every device of the job, the parameters are replicated. Prints
the loss of every step (process 0) as a RESULT line."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((jax.device_count(),), ("data",))
rng = np.random.default_rng(0)
x_all = rng.normal(size=(64, 8)).astype(np.float32)
y_all = (x_all @ rng.normal(size=(8, 1)) + 0.1).astype(np.float32)


class MLP(nnx.Module):

  def __init__(self, rngs):
    self.l1 = nnx.Linear(8, 16, rngs=rngs)
    self.l2 = nnx.Linear(16, 1, rngs=rngs)

  def __call__(self, x):
    return self.l2(jax.nn.tanh(self.l1(x)))


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
replicated = NamedSharding(mesh, P())
state = nnx.state((model, optimizer))
nnx.update((model, optimizer), jax.device_put(state, replicated))


@nnx.jit
def step(model, optimizer, x, y):
  def loss_fn(model):
    return jnp.mean((model(x) - y) ** 2)
  loss, grads = nnx.value_and_grad(loss_fn)(model)
  optimizer.update(model, grads)
  return loss


batch = NamedSharding(mesh, P("data"))
losses = []
for i in range(5):
  sl = slice((i % 2) * 32, (i % 2) * 32 + 32)
  x = jax.make_array_from_callback((32, 8), batch, lambda idx: x_all[sl][idx])
  y = jax.make_array_from_callback((32, 1), batch, lambda idx: y_all[sl][idx])
  losses.append(float(step(model, optimizer, x, y)))
if jax.process_index() == 0:
  print("RESULT " + json.dumps({"losses": losses, "devices": jax.device_count(),
                                "platform": jax.devices()[0].platform}), flush=True)

"""Data-parallel training of a small MLP: the batch is sharded over all
devices (of every process), the parameters are replicated, and jit inserts
the gradient all-reduce. On one process or several:

  JAX_PLATFORMS=myplugin MYPLUGIN_NUM_DEVICES=8 python examples/train_mlp.py
  myplugin-run -n 2 --devices-per-process 4 -- python examples/train_mlp.py
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def loss_fn(p, x, y):
  h = jax.nn.gelu(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)


@jax.jit
def step(p, x, y):
  loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
  return jax.tree.map(lambda a, g: a - 0.05 * g, p, grads), loss


def main():
  mesh = Mesh(np.array(jax.devices()), ("batch",))
  rng = np.random.default_rng(0)
  x = rng.normal(size=(1024, 32)).astype(np.float32)
  y = (np.sin(x[:, :1] * 2) + x[:, 1:2] ** 2).astype(np.float32)
  params = {
      "w1": (rng.normal(size=(32, 128)) / np.sqrt(32)).astype(np.float32), "b1": np.zeros(128, np.float32),
      "w2": (rng.normal(size=(128, 1)) / np.sqrt(128)).astype(np.float32), "b2": np.zeros(1, np.float32),
  }
  params = jax.device_put(params, NamedSharding(mesh, P()))
  x, y = jax.device_put((x, y), NamedSharding(mesh, P("batch")))
  for i in range(20):
    params, loss = step(params, x, y)
    print(f"step {i:3d}  loss {float(loss):.7f}")


# Importable without devices: ci/gpu_compile_matrix.sh compiles `step` for GPUs.
if __name__ == "__main__":
  main()

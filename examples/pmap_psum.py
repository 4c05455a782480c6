"""The pmap example of the multi-process seed: every process runs it, and
the psum adds over the devices of all of them.

  myplugin-run -n 4 --devices-per-process 2 -- python examples/pmap_psum.py
  JAX_PLATFORMS=myplugin MYPLUGIN_NUM_DEVICES=8 python examples/pmap_psum.py
"""
import jax
import jax.numpy as jnp

print("global devices:", jax.device_count(), "local devices:", jax.local_device_count(),
      "process", jax.process_index(), "of", jax.process_count())
print(jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.ones(jax.local_device_count())))

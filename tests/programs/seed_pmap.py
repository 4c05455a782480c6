"""The pmap example of the seed document "multi-process", on one process,
plus the device counts that jax reports. It knows nothing of myplugin.

usage: python seed_pmap.py OUT.npz   ({rank} in OUT is the process index)
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

out = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.ones(jax.local_device_count()))
print(out)
np.savez(
    sys.argv[1].format(rank=jax.process_index()),
    psum=np.asarray(out),
    counts=np.array([jax.device_count(), jax.local_device_count(), jax.process_index(), jax.process_count()]),
    platform=np.array(jax.devices()[0].platform),
)

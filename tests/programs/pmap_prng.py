"""jax's multi-process pmap test with PRNG key inputs (threefry's loops and
its rotation constants in the program): each process maps its own devices'
keys, split from one key for every device of the job. It knows nothing of
myplugin.

usage: python pmap_prng.py OUT.npz   ({rank} in OUT is the process index)
"""
import sys

import jax
import numpy as np

n, me = jax.local_device_count(), jax.process_index()
keys = jax.random.split(jax.random.key(0), jax.device_count())[me * n:(me + 1) * n]
out = jax.pmap(lambda k: jax.random.normal(k, shape=(2,)))(keys)
np.savez(sys.argv[1].format(rank=me), normal=np.asarray(out), platform=np.array(jax.devices()[0].platform))

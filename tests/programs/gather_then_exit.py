"""A program that knows nothing of myplugin: two
multihost_utils.process_allgather calls (each reads one shard of a
replicated result, so another local device's part of the program may still
run when the program reaches its end), a print, then its end. Run under
myplugin-run; prints RESULT with both gathers.
"""
import jax
import numpy as np
from jax.experimental import multihost_utils

jax.distributed.initialize()
me = jax.process_index()
a = multihost_utils.process_allgather(np.arange(4, dtype=np.int32) + me, tiled=True)
b = multihost_utils.process_allgather(np.int32([me]), tiled=True)
print("RESULT", a.tolist(), b.tolist(), flush=True)

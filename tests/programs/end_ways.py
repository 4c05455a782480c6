"""A small multi-process job whose rank 1 ends in the way argv[1] names,
after a collective whose result every rank prints (the sweep of
tests/test_clean_exits.py). Ways: return, exit3 (sys.exit(3)), raise,
os_exit (os._exit(4)), sigterm, sigint (sent to itself), inflight (a
collective launched and not waited for, then a normal exit: the other rank
waits for its result), sending (rank 0 sends rank 1 a 64 MiB array and its
program ends at once, while the bytes are still on their way: rank 1 prints
what it received)."""
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils as mu
from jax.sharding import NamedSharding, PartitionSpec as P

way = sys.argv[1]
gathered = mu.process_allgather(np.arange(4) + jax.process_index())
print("RESULT", gathered.tolist(), flush=True)
mesh = jax.make_mesh((jax.device_count(),), ("x",))
ones = jax.make_array_from_callback((jax.device_count(),), NamedSharding(mesh, P("x")), lambda i: np.ones(1))
total = jax.jit(jnp.sum)
if jax.process_index() == 1:
  if way == "exit3":
    sys.exit(3)
  if way == "raise":
    raise ValueError("bad end")
  if way == "os_exit":
    os._exit(4)
  if way in ("sigterm", "sigint"):
    os.kill(os.getpid(), signal.SIGTERM if way == "sigterm" else signal.SIGINT)
    time.sleep(60)
  if way == "inflight":
    total(ones)  # launched, never waited for
    sys.exit(0)
elif way == "inflight":
  print("SUM", float(total(ones)), flush=True)
if way == "sending":
  from jax.sharding import SingleDeviceSharding
  dev = [SingleDeviceSharding(jax.local_devices(process_index=p)[0]) for p in (0, 1)]
  n = (64 << 20) // 4
  sent = jax.make_array_from_callback((n,), dev[0], lambda idx: np.arange(n, dtype=np.float32)[idx], dtype=np.float32)
  got = jax.device_put(sent, dev[1])  # rank 0's program ends right after this
  if jax.process_index() == 1:
    print("RECEIVED", bool(np.array_equal(np.asarray(got), np.arange(n, dtype=np.float32))), flush=True)

"""One process of bench/cross_host_transfers.py (a job of 2 processes with one
device each, started by jax_plugin.launcher): process 0's device sends
float32 arrays of each size (MiB, argv[1]) to process 1's with
jax.device_put, `rounds` times (argv[2]); process 1 times each from a barrier
to the array being ready, and times numpy's copy of the same bytes in its
own memory (into a new array, and into a warm one). Process 1 prints one RESULT line per size."""
import json
import os
import resource
import sys
import time

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from jax_plugin import distributed

sizes = [int(s) for s in sys.argv[1].split(",")]
rounds = int(sys.argv[2])
me = jax.process_index()
src = SingleDeviceSharding(jax.local_devices(process_index=0)[0])
dst = SingleDeviceSharding(jax.local_devices(process_index=1)[0])

for mib in sizes:
  n = (mib << 20) // 4
  # Only process 0 holds the data; process 1 holds no shard of y.
  y = jax.make_array_from_callback((n,), src, lambda idx: np.full((n,), 1.5, np.float32)[idx],
                                dtype=np.float32)
  times, error = [], None
  for r in range(rounds):
    distributed.barrier(f"bench-{mib}-{r}", timeout=600)
    t0 = time.perf_counter()
    try:
      z = jax.device_put(y, dst)
      if me == 1:
        z.block_until_ready()
        ok = float(np.asarray(z.addressable_shards[0].data[-1:])[0]) == 1.5
        assert ok, "wrong data"
    except Exception as e:  # the old path refuses sizes above its limit
      error = f"{type(e).__name__}: {str(e)[:200]}"
    times.append(time.perf_counter() - t0)
    z = None
    if error:
      break
  if me == 1:
    # numpy's copy of the same bytes here: into a new array (as a transfer
    # fills a new buffer, whose pages the kernel must first clear) and into
    # one written before (warm pages), up to 1 GiB, scaled to the size.
    a = np.full(min(n, 256 << 20), 1.5, np.float32)
    fresh, warm = [], []
    for _ in range(3):
      t0 = time.perf_counter()
      b = a.copy()
      fresh.append((time.perf_counter() - t0) * n / a.size)
      t0 = time.perf_counter()
      np.copyto(b, a)
      warm.append((time.perf_counter() - t0) * n / a.size)
      del b
    # The engine's own copy into a new buffer on this device (whose pages,
    # unlike numpy's large arrays, are not huge pages here).
    on_device = jax.device_put(a, dst)
    del a
    engine_copy = jax.jit(lambda v: v + 0.5)
    engine_copy(on_device).block_until_ready()
    engine = []
    for _ in range(3):
      t0 = time.perf_counter()
      c = engine_copy(on_device).block_until_ready()
      engine.append((time.perf_counter() - t0) * n / on_device.size)
      del c
    del on_device
    print("RESULT " + json.dumps({"mib": mib, "times": times, "memcpy": min(fresh), "memcpy_warm": min(warm),
                                  "engine_copy": min(engine),
                                  "error": error,
                                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}),
          flush=True)
  y = None
distributed.barrier("bench-end", timeout=600)

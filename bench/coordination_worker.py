"""One process of bench/coordination.py. Imports first, says it is ready,
waits for the go file, then times only the initialize call.

usage: python coordination_worker.py {ours|jax} ADDRESS N ID READY_DIR GO_FILE
"""
import os
import sys
import time

impl, address, n, pid, ready_dir, go_file = sys.argv[1:7]
n, pid = int(n), int(pid)
if impl == "ours":
  from jax_plugin import distributed
else:
  import jax

open(os.path.join(ready_dir, str(pid)), "w").close()
while not os.path.exists(go_file):
  time.sleep(0.001)
t0 = time.perf_counter()
if impl == "ours":
  distributed.initialize(address, n, pid)  # each side's default timeouts (both 300 s)
else:
  jax.distributed.initialize(coordinator_address=address, num_processes=n, process_id=pid)
t1 = time.perf_counter()
print(f"INIT {t1 - t0:.6f}", flush=True)
if impl == "ours":
  distributed.shutdown()
else:
  jax.distributed.shutdown()

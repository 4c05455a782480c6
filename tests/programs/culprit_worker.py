"""A two-rank job in which rank 1 causes the failure while rank 0 waits in
an all-reduce. No jax import: the race is between processes, not programs.

  culprit_worker.py raise|kill|stop
"""
import os
import signal
import sys

import numpy as np

from jax_plugin import collectives, distributed

mode = sys.argv[1]
distributed.initialize()
# A first all-reduce connects the communicator, so that rank 0 waits on a
# live connection to rank 1 when rank 1 fails.
collectives.all_reduce(np.ones(4, np.float32))
if distributed.process_id() == 1:
  if mode == "raise":
    raise ValueError("rank 1 fails on purpose")
  os.kill(os.getpid(), {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}[mode])
collectives.all_reduce(np.ones(4, np.float32))
print("all-reduce returned, which it must not", flush=True)

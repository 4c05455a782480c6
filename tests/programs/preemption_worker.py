"""A training loop with jax's preemption sync point, unchanged:
`multihost_utils.reached_preemption_sync_point(step)` at every step, and a
collective every step (as a data-parallel step has). Ranks named in the
argument send themselves SIGTERM at a step, as a scheduler would.

  preemption_worker.py R@S[,R@S...]|none STEPS

Prints RUNNING once it has asked for the sync point, then one RESULT line
per process: the step at which the sync point was reached (null if
never), and the steps run.
"""
import json
import os
import signal
import sys
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

notices = {int(r): int(s) for r, s in (x.split("@") for x in sys.argv[1].split(",") if "@" in x)}
steps = int(sys.argv[2])
me = jax.process_index()
synced = None
ran = 0
for step in range(steps):
  if multihost_utils.reached_preemption_sync_point(step):
    synced = step
    break
  if notices.get(me) == step:
    os.kill(os.getpid(), signal.SIGTERM)
  if step == 3:
    print("RUNNING", flush=True)  # the sync point has been asked: SIGTERM is a notice now
  multihost_utils.process_allgather(np.array([step]))
  ran += 1
  time.sleep(0.005)
print("RESULT " + json.dumps({"rank": me, "synced": synced, "ran": ran}), flush=True)

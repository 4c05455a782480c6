"""A preemption notice while a process is inside a long XLA compile.

  preemption_compile.py COMPILER SIGNALLED OPS COLLECTIVE

Every process runs a loop with jax's sync point at every step (and, with
COLLECTIVE=1, a collective every step, as a data-parallel step has; with 0
the processes' steps are tied only at step COMPILE_AT). At step COMPILE_AT,
after a barrier, process COMPILER compiles a program of OPS distinct
operations on its own device (lowered beforehand: the window is XLA's
compile alone, where Python runs no signal handler on the main thread),
and process SIGNALLED starts a helper that sends it SIGTERM DELAY_S later,
while the compile runs. Each process prints one RESULT line: the step at
which the sync point was reached, the steps run, the step it was in when
the signal was sent, and the compile's start and end (wall clock).
"""
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

COMPILE_AT = 5
DELAY_S = 1.0
MAX_STEPS = 2000  # about 25 s: without a sync point the job ends, and the test fails
compiler, signalled, ops, collective = (int(a) for a in sys.argv[1:5])
me = jax.process_index()


def long_program(x):
  for i in range(ops):
    x = jnp.sin(x * (1.0 + i * 1e-3)) + jnp.cos(x + i)
  return x


lowered = jax.jit(long_program).lower(jnp.ones(4)) if me == compiler else None
started = []  # wall-clock start of every step
sender = None
compiled_from = compiled_to = None
synced = None
ran = 0
for step in range(MAX_STEPS):
  started.append(time.time())
  if multihost_utils.reached_preemption_sync_point(step):
    synced = step
    break
  if step == COMPILE_AT:
    multihost_utils.sync_global_devices("compile")
    if me == signalled:
      sender = subprocess.Popen(["sh", "-c", f"sleep {DELAY_S}; date +%s.%N; kill -TERM {os.getpid()}"],
                                stdout=subprocess.PIPE, text=True)
    if me == compiler:
      compiled_from = time.time()
      lowered.compile()(jnp.ones(4)).block_until_ready()
      compiled_to = time.time()
  if collective:
    multihost_utils.process_allgather(np.array([step]))
  ran += 1
  time.sleep(0.01)
try:
  sent = float(sender.communicate(timeout=60)[0]) if sender is not None else None
finally:
  if sender is not None and sender.poll() is None:
    sender.kill()  # past its deadline: never left behind
    sender.wait(timeout=10)
print("RESULT " + json.dumps({
    "rank": me, "synced": synced, "ran": ran, "sent": sent, "compiled_from": compiled_from,
    "compiled_to": compiled_to, "started": started}), flush=True)

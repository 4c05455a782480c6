"""A process of a multi-process job in which something goes wrong around a
psum inside a pmap (a jitted program over every process's devices).

usage: straggler_worker.py MODE [SECONDS] [LAGGARD]
  sleep       the last process (or LAGGARD) sleeps in time.sleep before the second psum
  busy        the last process spins in a Python loop instead
  gil         the last process sleeps in a C call that holds the GIL
  mismatch    process 1 issues an all-gather where the others issue the psum (call #2)
  early_exit  process 1 leaves its loop after 3 steps, the others run 5
  sigkill     the last process kills itself with SIGKILL before call #2
  many        40 psums, then every process writes its flight recorder on request
"""
import ctypes
import json
import os
import signal
import sys
import threading
import time

import jax
import numpy as np

mode = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
r = jax.process_index()
n = jax.process_count()
local = jax.local_device_count()
laggard = int(sys.argv[3]) if len(sys.argv) > 3 else n - 1


def event(name, **fields):
  print("RESULT " + json.dumps({"event": name, "time": time.time(), **fields}), flush=True)


def spin(s):
  end = time.monotonic() + s
  while time.monotonic() < end:  # BUSY_LINE
    pass


def loader(ready):
  ready.wait()  # LOADER_LINE: a second Python thread, which every report must show too


threading.Thread(target=loader, args=(threading.Event(),), daemon=True, name="loader").start()
psum = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")
gather = jax.pmap(lambda v: jax.lax.all_gather(v, "i"), axis_name="i")
x = np.full((local, 4), r + 1, np.float32)
total = float(local * sum(range(1, n + 1)))

try:
  if mode in ("sleep", "busy", "gil"):
    assert float(np.asarray(psum(x))[0, 0]) == total  # call #0: compile and connect
    event("warm")
    if r == laggard:
      if mode == "sleep":
        time.sleep(seconds)  # SLEEP_LINE
      elif mode == "busy":
        spin(seconds)
      else:
        ctypes.PyDLL(None).sleep(int(seconds))  # GIL_LINE
    else:
      event("waiting")
    out = float(np.asarray(psum(x))[0, 0])
    event("done", value=out, expected=total)
  elif mode == "mismatch":
    for step in range(4):
      if step == 2 and r == 1:
        gather(x).block_until_ready()
      else:
        psum(x).block_until_ready()
  elif mode == "early_exit":
    for step in range(5 if r != 1 else 3):
      psum(x).block_until_ready()
  elif mode == "sigkill":
    for step in range(4):
      if step == 2 and r == laggard:
        os.kill(os.getpid(), signal.SIGKILL)
      psum(x).block_until_ready()
  elif mode == "many":
    for step in range(40):
      psum(x).block_until_ready()
    from jax_plugin import straggler
    event("dumped", folder=straggler.dump_flight_recorder())
  event("finished")
except Exception as e:
  event("error", error=str(e))
  raise

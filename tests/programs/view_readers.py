"""One process, several threads: jaxlib's own external references on views
of numpy memory. Reader threads take zero-copy numpy views of the current
array (np.asarray, the buffer protocol: jaxlib adds a reference with the
GIL let go and drops it with the GIL held) while the main thread replaces
it with a new view of numpy memory (jax.dlpack.from_dlpack) and lets go of
the old one, so that a reader's drop is often the last, which runs numpy's
deleter (it takes the GIL). (No thread deletes an array another reads:
that is a race in jaxlib itself, which aborts on jax's CPU backend.) Bounded by ROUNDS and SECONDS; prints
RESULT {"rounds", "reads", "wrong"} and exits 0, on any platform.

usage: JAX_PLATFORMS=myplugin python view_readers.py
"""
import json
import os
import threading
import time

import jax
import numpy as np

ROUNDS = int(os.environ.get("ROUNDS", "1500"))
SECONDS = float(os.environ.get("SECONDS", "30"))
current = [None, None]  # the array, the value it must hold
stop = threading.Event()
reads = [0]
wrong = []


def reader():
  while not stop.is_set():
    a, want = current
    if a is None:
      continue
    try:
      got = np.asarray(a) if reads[0] % 2 else np.frombuffer(memoryview(np.asarray(a)), dtype=np.float32)
      ok = np.array_equal(got, want)
      del got, a
    except Exception as e:  # noqa: BLE001
      wrong.append(f"{type(e).__name__}: {e}")
      continue
    reads[0] += 1
    if not ok:
      wrong.append("values differ")


threads = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
for t in threads:
  t.start()
deadline = time.monotonic() + SECONDS
rounds = 0
for i in range(ROUNDS):
  if time.monotonic() > deadline:
    break
  value = np.full(2048, float(i), np.float32)
  view = jax.dlpack.from_dlpack(value)
  current[:] = [view, value]
  del value, view
  rounds += 1
stop.set()
for t in threads:
  t.join(timeout=30)
print("RESULT " + json.dumps({"rounds": rounds, "reads": reads[0], "wrong": wrong[:5]}), flush=True)

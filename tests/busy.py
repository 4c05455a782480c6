"""A machine kept busy for a test: spinning processes, each with a deadline
(`deadline_s`, after which a watchdog kills its process group, as `timeout`
would), all killed on the way out (races that need a process to be slow,
and exit reports measured under load)."""
import contextlib
import os
import subprocess
import sys
import threading

from proc import kill_group


def _kill_groups(procs) -> None:
  for p in procs:
    kill_group(p)


@contextlib.contextmanager
def busy(spinners: int | None = None, deadline_s: float = 600):
  """`spinners` spinning processes (default: one for every two cores)."""
  n = spinners if spinners is not None else max(1, (os.cpu_count() or 2) // 2)
  procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(n)]
  watchdog = threading.Timer(deadline_s, _kill_groups, args=(procs,))
  watchdog.daemon = True
  watchdog.start()
  try:
    yield
  finally:
    watchdog.cancel()
    _kill_groups(procs)
    for p in procs:
      p.wait(timeout=30)

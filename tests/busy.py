"""A machine kept busy for a test: spinning processes, each with a deadline
of its own, killed on the way out (races that need a process to be slow,
and exit reports measured under load)."""
import contextlib
import os
import signal
import subprocess
import sys


@contextlib.contextmanager
def busy(spinners: int | None = None, deadline_s: int = 600):
  """`spinners` spinning processes (default: one for every two cores)."""
  n = spinners if spinners is not None else max(1, (os.cpu_count() or 2) // 2)
  procs = [subprocess.Popen(["timeout", str(deadline_s), sys.executable, "-c", "while True: pass"],
                            start_new_session=True) for _ in range(n)]
  try:
    yield
  finally:
    for p in procs:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      p.wait(timeout=30)

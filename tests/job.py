"""A multi-process job for tests: N worker processes with MYPLUGIN_*
identities, started directly (process 0 hosts the service). Every process
has its own process group, every wait has a deadline, and leaving the
context kills every group that is still there."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from proc import child_env

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def native_stacks(pid: int) -> str:
  """Every thread's stack of a process still running (gdb, where the machine
  has it and may trace): what a rank that never says what a test waits for
  is doing."""
  gdb = shutil.which("gdb")
  if gdb is None:
    return "(no gdb here: no stacks)"
  try:
    out = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"], capture_output=True,
                         text=True, timeout=30, start_new_session=True)
  except subprocess.TimeoutExpired:
    return "(gdb took over 30 s)"
  lines = [l for l in out.stdout.splitlines() if l.startswith(("Thread ", "#"))]
  return "\n".join(lines[:400]) if lines else f"(gdb: {out.stderr.strip()[-300:]})"


class WaitsForEvents:
  """wait_event for a job class with procs, event(rank, name) and all_output()."""

  def ended(self, rank: int) -> bool:
    """The rank exited and all it printed can be read."""
    return self.procs[rank].poll() is not None

  def stacks(self, ranks) -> str:
    """Every thread's stack of each of `ranks` still running."""
    return "".join(f"\n--- rank {r}'s threads (pid {self.procs[r].pid}) ---\n{native_stacks(self.procs[r].pid)}"
                   for r in ranks if self.procs[r].poll() is None)

  def wait_event(self, name: str, ranks=None, timeout: float = 120) -> None:
    ranks = range(len(self.procs)) if ranks is None else ranks
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if all(self.event(r, name) for r in ranks):
        return
      if any(self.ended(r) and not self.event(r, name) for r in ranks):
        break
      time.sleep(0.05)
    stuck = self.stacks(r for r in ranks if not self.event(r, name))
    raise AssertionError(f"event {name!r} not seen on ranks {list(ranks)}\n{self.all_output()}{stuck}")


class Job(WaitsForEvents):

  def __init__(self, n: int, args: list[str], *, env: dict[str, str] | None = None, per_rank_env=None,
               program: str = "coord_worker.py", identity: bool = True):
    self.n = n
    self.port = free_port()
    jax_port = free_port()
    self.procs: list[subprocess.Popen] = []
    self.lines: list[list[tuple[float, str]]] = [[] for _ in range(n)]
    self.exit_times: dict[int, float] = {}
    self._threads: list[list[threading.Thread]] = [[] for _ in range(n)]  # each rank's readers
    try:
      for rank in range(n):
        e = child_env(PYTHONUNBUFFERED="1")
        if identity:  # who the process is, in our variables
          e.update(MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{self.port}", MYPLUGIN_NUM_PROCESSES=str(n),
                   MYPLUGIN_PROCESS_ID=str(rank), MYPLUGIN_JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{jax_port}")
        e.update(env or {})
        if per_rank_env:
          e.update(per_rank_env(rank))
        argv = [a(rank) if callable(a) else a for a in args]
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "programs", program), *argv], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                             cwd=tempfile.gettempdir())
        self.procs.append(p)
        # stdout and stderr apart: RESULT lines are read from stdout only, so a
        # log line on stderr can never split one.
        for stream, is_stdout in ((p.stdout, True), (p.stderr, False)):
          t = threading.Thread(target=self._read, args=(rank, p, stream, is_stdout), daemon=True)
          t.start()
          self._threads[rank].append(t)
    except BaseException:
      self.kill_all()  # the ranks already started
      raise

  def _read(self, rank, p, stream, is_stdout):
    for line in stream:
      self.lines[rank].append((time.monotonic(), line.rstrip("\n"), is_stdout))
    if is_stdout:
      p.wait()
      self.exit_times[rank] = time.monotonic()

  def ended(self, rank: int) -> bool:
    # exit_times is set once stdout is read to its end: a rank that exited
    # right after printing its last RESULT may still have it in the pipe.
    return rank in self.exit_times

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.kill_all()

  def kill_all(self):
    for p in self.procs:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    for p in self.procs:
      p.wait(timeout=30)

  def signal(self, rank: int, sig: int):
    os.killpg(self.procs[rank].pid, sig)

  def results(self, rank: int) -> list[dict]:
    return [json.loads(l[len("RESULT "):]) for _, l, out in list(self.lines[rank]) if out and l.startswith("RESULT ")]

  def event(self, rank: int, name: str) -> dict | None:
    return next((r for r in self.results(rank) if r.get("event") == name), None)

  def output(self, rank: int) -> str:
    return "\n".join(l for _, l, _ in list(self.lines[rank]))

  def all_output(self) -> str:
    return "\n".join(f"--- rank {r} (exit {self.procs[r].poll()}) ---\n{self.output(r)}" for r in range(self.n))

  def wait(self, ranks=None, timeout: float = 120) -> dict[int, int]:
    """Exit codes; AssertionError (the job is then killed) past the deadline."""
    ranks = list(range(self.n)) if ranks is None else list(ranks)
    deadline = time.monotonic() + timeout
    for r in ranks:
      try:
        self.procs[r].wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        out = self.all_output() + self.stacks(ranks)
        self.kill_all()
        raise AssertionError(f"rank {r} still running after {timeout} s\n{out}")
    # Only the waited ranks' readers: a rank left running (stopped, say)
    # keeps its pipes open, and joining its readers would wait out the timeout.
    for r in ranks:
      for t in self._threads[r]:
        t.join(timeout=5)
    return {r: self.procs[r].returncode for r in ranks}

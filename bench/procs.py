"""Process helpers shared by the benchmarks: free ports, and killing whole
process groups on the way out."""
import os
import signal
import socket


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def kill_groups(procs) -> None:
  for p in procs:
    try:
      os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass

"""Which CPUs each rank of a job on one host may run on (myplugin-run --cpu-bind).

Without a binding every process's engine sizes its thread pools to all the
host's CPUs, so N processes on one host run N times as many busy threads as
there are CPUs, and a process that starts (a rank started again) takes its
CPU time from the others. With it, rank r of N runs on its own contiguous
share of the CPUs the launcher may use (`sched_getaffinity`), as
`mpirun --bind-to core` and Slurm's `--cpu-bind=cores` do; the engine then
sizes its pools to that share. More ranks than CPUs: each rank gets one CPU,
in turn, and some share.
"""

from __future__ import annotations

import os


def cpu_shares(num_processes: int, cpus: list[int]) -> list[list[int]]:
  """Rank r's CPUs, for r in range(num_processes)."""
  if num_processes < 1 or not cpus:
    raise ValueError(f"cannot share {len(cpus)} CPUs among {num_processes} processes")
  cpus = sorted(cpus)
  if num_processes >= len(cpus):
    return [[cpus[r % len(cpus)]] for r in range(num_processes)]
  # Shares differ by at most one CPU; the larger ones go first.
  base, extra = divmod(len(cpus), num_processes)
  shares, start = [], 0
  for r in range(num_processes):
    size = base + (1 if r < extra else 0)
    shares.append(cpus[start:start + size])
    start += size
  return shares


def launcher_cpus() -> list[int]:
  """The CPUs this process may run on."""
  return sorted(os.sched_getaffinity(0))


def bind(pid: int, cpus: list[int]) -> str | None:
  """Binds a process just started (its only thread, which every thread it
  starts inherits the binding from); why it could not, else None. A process
  already gone is left be."""
  try:
    os.sched_setaffinity(pid, cpus)
  except ProcessLookupError:
    pass
  except OSError as e:
    return f"cannot bind process {pid} to CPUs {cpus}: {e}"
  return None

"""Several processes of a job on one GPU (myplugin-run --share-gpu).

To debug an 8-way data-parallel job on a workstation's one GPU, each of the
8 processes runs on that GPU as if it were its own, and the job's topology
numbers them apart (device ids 0..7, one per process). Three things make
that work, given per rank by `rank_environment`:

- **The same GPU**: MYPLUGIN_VISIBLE_DEVICES names it (a CUDA ordinal) in
  every process, one device each.
- **Its own NCCL host identity**: NCCL refuses two ranks with the same host
  hash on the same GPU ("Duplicate GPU detected"); NCCL_HOSTID (read by
  NCCL's getHostHash since 2.5.6) replaces the host hash, so each process
  looks like a host of its own and the ranks talk through NCCL's socket
  transport over loopback (NCCL_SOCKET_IFNAME=lo unless set): no P2P or
  shared-memory transport, which need equal host hashes.
- **A share of the memory**: each process's engine takes its fraction of the
  GPU (jax's XLA_CLIENT_MEM_FRACTION, preallocated by default), so N
  processes get `TOTAL_SHARE / N` each, leaving the rest for the N CUDA
  contexts and NCCL's buffers. A fraction the user set is kept, and refused
  when N of them cannot fit.

Other launchers (srun, mpirun) get the same from `rank_environment` (see
docs/clusters.md, "Several processes on one GPU").
"""

from __future__ import annotations

import math
import os
import socket

# The share of the GPU's memory the processes' engines get between them;
# the rest is for their CUDA contexts (about 0.5 GiB each) and NCCL.
TOTAL_SHARE = 0.9


def memory_share(num_processes: int) -> float:
  """Each process's XLA_CLIENT_MEM_FRACTION, rounded down to 1/1000."""
  return math.floor(TOTAL_SHARE / num_processes * 1000) / 1000


def rank_environment(rank: int, num_processes: int, gpu: int = 0, environ=None) -> dict[str, str]:
  """The variables rank `rank` of `num_processes` needs to share GPU `gpu`
  (a CUDA ordinal) with the others; ValueError, naming the cause, for a
  request that cannot fit."""
  environ = os.environ if environ is None else environ
  if num_processes < 1 or not 0 <= rank < num_processes:
    raise ValueError(f"rank {rank} is not one of {num_processes} processes")
  if gpu < 0:
    raise ValueError(f"GPU {gpu} is not a CUDA ordinal (0 or more)")
  from jax_plugin import _myplugin
  try:
    # jax's variables, read as the engine will read them: a malformed one is
    # refused here, naming it.
    memory = _myplugin.gpu_memory_settings(dict(environ))
  except Exception as e:
    raise ValueError(str(e).split(": ", 1)[-1]) from None
  env = {
      "MYPLUGIN_VISIBLE_DEVICES": str(gpu),
      "MYPLUGIN_NUM_DEVICES": "1",
      "NCCL_HOSTID": f"{socket.gethostname()}-gpu{gpu}-process{rank}",
  }
  if not environ.get("NCCL_SOCKET_IFNAME"):
    env["NCCL_SOCKET_IFNAME"] = "lo"
  fraction = memory.get("memory_fraction")
  if fraction is None:
    share = memory_share(num_processes)
    if share <= 0:
      raise ValueError(f"{num_processes} processes cannot share one GPU: each would get less than 1/1000 of its memory")
    env["XLA_CLIENT_MEM_FRACTION"] = f"{share:g}"
  elif fraction * num_processes > 1:
    name = "XLA_CLIENT_MEM_FRACTION" if environ.get("XLA_CLIENT_MEM_FRACTION") else "XLA_PYTHON_CLIENT_MEM_FRACTION"
    raise ValueError(f"{num_processes} processes with {name}={environ.get(name)} each would take "
                     f"{fraction * num_processes:.3g} times the GPU's memory: set it to at most "
                     f"{memory_share(num_processes):g} (or leave it unset: {TOTAL_SHARE:g} of the GPU is split "
                     f"between the processes)")
  return env

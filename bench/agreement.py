"""The host's part of every collective call across processes: the signature
agreement (each call's records exchanged, a barrier of the group) that runs
before any data moves, on the CPU engine's transports, at 2, 4 and 8
processes, with a model for 1,024 and 16,384 (issue 51, item 4).

Each job's processes (one device each) time, after a warm-up, `--calls`
barriers of the whole job (`jax_plugin.collectives.barrier`: the agreement
alone) and as many 4-byte all-reduces (agreement + data), interleaved;
process 0 prints the median and best per call. Jobs are interleaved round
by round. On a machine with fewer cores than processes the figures include
the processes' wait for a core: say so when quoting them.

The model: the agreement is an all-gather of fixed-size records, whose
latency grows with the number of hops it takes. Fitting t(n) = a + b (n - 1)
(one hop per peer, a ring) and t(n) = a + b log2(n) (recursive doubling) to
the medians, it prints both at 1,024 and 16,384 processes.

usage: python bench/agreement.py [--processes 2,4,8] [--transports gloo,shm] [--rounds 3] [--calls 2000]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402

WORKER = r"""
import statistics, sys, time
import numpy as np
import jax
from jax_plugin import collectives
calls = int(sys.argv[1])
x = np.ones(1, np.float32)
for _ in range(50):
  collectives.barrier()
  collectives.all_reduce(x)
agree, reduce_ = [], []
for _ in range(calls):
  t = time.perf_counter(); collectives.barrier(); agree.append(time.perf_counter() - t)
  t = time.perf_counter(); collectives.all_reduce(x); reduce_.append(time.perf_counter() - t)
if jax.process_index() == 0:
  print("RESULT", statistics.median(agree), min(agree), statistics.median(reduce_), min(reduce_), flush=True)
"""


def run_job(n: int, transport: str, calls: int, timeout: float = 600) -> tuple[float, float, float, float]:
  port = free_port()
  base = {k: v for k, v in os.environ.items() if not k.startswith(("MYPLUGIN_", "JAX_"))}
  procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(calls)],
                            env=dict(base, JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                                     MYPLUGIN_NUM_PROCESSES=str(n), MYPLUGIN_PROCESS_ID=str(r),
                                     MYPLUGIN_NUM_DEVICES="1", MYPLUGIN_TRANSPORT=transport),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
           for r in range(n)]
  try:
    out, err = procs[0].communicate(timeout=timeout)
    for p in procs[1:]:
      p.wait(timeout=60)
    line = next((l for l in out.splitlines() if l.startswith("RESULT")), None)
    if procs[0].returncode != 0 or line is None:
      raise RuntimeError(f"{n} processes over {transport} failed:\n{err[-3000:]}")
    return tuple(float(v) for v in line.split()[1:])
  finally:
    kill_groups(procs)


def fit(ns, ts, x):
  """Least squares of t = a + b x(n)."""
  xs = [x(n) for n in ns]
  mx, mt = statistics.mean(xs), statistics.mean(ts)
  sxx = sum((v - mx) ** 2 for v in xs)
  b = sum((v - mx) * (t - mt) for v, t in zip(xs, ts)) / sxx if sxx else 0.0
  return mt - b * mx, b


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--processes", default="2,4,8")
  parser.add_argument("--transports", default="gloo,shm")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--calls", type=int, default=2000)
  args = parser.parse_args()
  ns = [int(v) for v in args.processes.split(",")]
  transports = args.transports.split(",")
  runs = {(t, n): [] for t in transports for n in ns}
  start = time.time()
  for _ in range(args.rounds):
    for key in runs:
      runs[key].append(run_job(key[1], key[0], args.calls))
  print(f"{os.cpu_count()} cores; {args.rounds} rounds interleaved of {args.calls} calls each; medians over rounds "
        f"of each job's median call (best: the best call of any round); {time.time() - start:.0f} s")
  print("\n| transport | processes | agreement alone (barrier) | 4-byte all-reduce |")
  print("|---|---|---|---|")
  for (t, n), rs in runs.items():
    agree = statistics.median(r[0] for r in rs)
    reduce_ = statistics.median(r[2] for r in rs)
    print(f"| {t} | {n} | {agree * 1e6:.1f} us (best {min(r[1] for r in rs) * 1e6:.1f}) | "
          f"{reduce_ * 1e6:.1f} us (best {min(r[3] for r in rs) * 1e6:.1f}) |")
  for t in transports:
    # From the medians, and from the best calls: where processes outnumber
    # cores, the medians mostly measure waiting for a core.
    for what, pick in (("medians", lambda rs: statistics.median(r[0] for r in rs)),
                       ("best calls", lambda rs: min(r[1] for r in rs))):
      ts = [pick(runs[(t, n)]) for n in ns]
      ring = fit(ns, ts, lambda n: n - 1)
      tree = fit(ns, ts, lambda n: math.log2(n))
      model = ", ".join(f"{m}: {(a + b * x(n)) * 1e3:.2f} ms at {n}" for m, (a, b), x in
                        (("ring", ring, lambda n: n - 1), ("log", tree, math.log2)) for n in (1024, 16384))
      print(f"\n{t}: agreement per call modelled from the {what} ({model})")


if __name__ == "__main__":
  main()

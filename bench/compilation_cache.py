"""jax's persistent compilation cache: the compile time of a training step
(bench/compilation_cache_worker.py) in a fresh process with an empty cache
("cold": compile, serialize, write) and in the next fresh process with the
same cache ("cached": read, load), round by round, each round a new cache
directory. Cases: myplugin on one process, myplugin on 2 processes x 1
device (partition on the shadow engine + rewrite + local compile when cold),
and jax's own CPU backend on one process for comparison. Only the compile
call is timed (lowering excluded); for 2 processes, process 0's.

usage: python bench/compilation_cache.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402

CASES = [("myplugin, 1 process", "myplugin", 1), ("myplugin, 2 processes x 1 device", "myplugin", 2),
         ("jax cpu, 1 process", "cpu", 1)]


def run(backend: str, n: int, cache_dir: str, timeout=600) -> tuple[float, int, int]:
  port = free_port()
  base = {k: v for k, v in os.environ.items() if not k.startswith(("MYPLUGIN_", "JAX_", "BENCH_"))}
  envs = []
  for r in range(n):
    if backend == "myplugin":
      e = dict(base, JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="1")
      if n > 1:
        e.update(MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", MYPLUGIN_NUM_PROCESSES=str(n),
                 MYPLUGIN_PROCESS_ID=str(r))
    else:
      e = dict(base, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1")
    envs.append(e)
  argv = [sys.executable, os.path.join(HERE, "compilation_cache_worker.py"), cache_dir]
  procs = [subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=tempfile.gettempdir()) for e in envs]
  try:
    out, err = procs[0].communicate(timeout=timeout)
    for p in procs[1:]:
      p.wait(timeout=120)
    if any(p.returncode != 0 for p in procs):
      raise RuntimeError(f"{backend} x{n} failed:\n{err[-3000:]}")
    line = next(l for l in out.splitlines() if l.startswith("RESULT compile"))
    _, _, seconds, hits, misses = line.split()
    return float(seconds), int(hits), int(misses)
  finally:
    kill_groups(procs)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=5)
  args = ap.parse_args()
  times = {name: {"cold": [], "cached": []} for name, _, _ in CASES}
  for rnd in range(args.rounds):
    for name, backend, n in CASES:
      with tempfile.TemporaryDirectory(prefix="cc-bench-") as d:
        cold, hits, _ = run(backend, n, d)
        assert hits == 0, f"{name}: a cold compile hit the cache"
        cached, hits, misses = run(backend, n, d)
        assert hits == 1 and misses == 0, f"{name}: the second run did not load from the cache ({hits}, {misses})"
      times[name]["cold"].append(cold)
      times[name]["cached"].append(cached)
      print(f"round {rnd}: {name}: cold {cold * 1e3:.0f} ms, cached {cached * 1e3:.0f} ms", file=sys.stderr,
            flush=True)
  print(f"\ntraining step compile, {args.rounds} rounds, best / median (a new process each)\n")
  print("| case | cold (compile + write) | cached (read + load) | cached/cold (best, median) |")
  print("|---|---|---|---|")
  for name, _, _ in CASES:
    c, h = times[name]["cold"], times[name]["cached"]
    print(f"| {name} | {min(c) * 1e3:.0f} / {statistics.median(c) * 1e3:.0f} ms | "
          f"{min(h) * 1e3:.1f} / {statistics.median(h) * 1e3:.1f} ms | "
          f"{min(h) / min(c):.3f}, {statistics.median(h) / statistics.median(c):.3f} |")


if __name__ == "__main__":
  main()

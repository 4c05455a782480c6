"""All-reduce bus bandwidth: myplugin's collectives against raw Gloo.

For 2 and 4 processes on this host, sizes 4 KB to 64 MB, interleaved round
by round: jax_plugin.collectives.all_reduce (signature check, bounded waits,
abort on failure, all included) on the shared-memory transport
(MYPLUGIN_TRANSPORT=shm) and on Gloo (=gloo), and Gloo's own ring all-reduce
from a C++ program with nothing of ours around it. Bus bandwidth follows
nccl-tests: busbw = bytes / time * 2 (n - 1) / n. The machine's memcpy
bandwidth is the ceiling.

usage: python bench/collectives.py [--processes 2,4] [--rounds 2] [--max-mb 64] [--raw-gloo PATH] [--plan]
       python bench/collectives.py --latency [--processes 2] [--rounds 5] [--transports shm,gloo]
       python bench/collectives.py --hosts [--rounds 3] [--max-mb 64]   (root: network namespaces)
--hosts runs 2 "hosts" (network namespaces on a bridge, tests/cluster/hosts.py)
x 2 processes each, 1 to 64 MB: the hierarchical transport (shared memory
within each host, Gloo between the hosts' leaders), Gloo over all 4, and raw
Gloo's ring over all 4; it chose MYPLUGIN_TRANSPORT=auto's pick for such
groups (collectives/defaults.h).
--latency times 4 KB all-reduces alone (2000 calls per round, each after a
barrier), for comparing builds: the flight recorder's cost on the
collective path is measured this way (docs/performance.md, "The flight recorder").
--raw-gloo PATH takes a raw_gloo_allreduce built before (the offline GPU
kit carries one: ci/gpu_tests.sh) instead of building it with CMake here;
--build-raw-gloo DIR only builds it into DIR and prints its path. --plan
prints the jobs a run would start, and starts none.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402
ROOT = os.path.dirname(HERE)
# Issue 16's goal for the shared-memory transport on one host, on the best
# call: this many times raw Gloo's bus bandwidth at every size from 1 MB,
# this share of memcpy at 64 MB, and a 4 KB all-reduce within this time.
GOAL_OVER_RAW, GOAL_MEMCPY_SHARE_64MB, GOAL_4KB_S = 4.0, 0.40, 20e-6


def build_type() -> str:
  """The wheel's CMake build type (pyproject.toml): the baseline's reduction
  loop is Gloo's header template, compiled into the baseline itself, so an
  unoptimized build would handicap it."""
  import tomllib
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["tool"]["scikit-build"]["cmake"]["build-type"]


BUILD_TIMEOUT_S = 900


def build_raw_gloo(build: str | None = None) -> str:
  build = build or os.path.join(ROOT, "build-bench")
  for step in (["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DMYPLUGIN_BUILD_BENCH=ON",
                f"-DCMAKE_BUILD_TYPE={build_type()}", f"-DPython_EXECUTABLE={sys.executable}"],
               ["cmake", "--build", build, "--target", "raw_gloo_allreduce"]):
    # A deadline, and the whole group (cmake, ninja, the compilers) killed on the way out.
    p = subprocess.Popen(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
      out, _ = p.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
      sys.exit(f"building raw_gloo_allreduce took over {BUILD_TIMEOUT_S} s: {' '.join(step)}")
    finally:
      kill_groups([p])
    if p.returncode != 0:
      sys.exit(f"building raw_gloo_allreduce failed: {' '.join(step)}\n{out[-3000:]}")
  return os.path.join(build, "raw_gloo_allreduce")


def host() -> str:
  """Cores, CPU model and load: 4 processes need 4 idle cores to say anything."""
  model = "unknown CPU"
  try:
    with open("/proc/cpuinfo") as f:
      model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
  except OSError:
    pass
  load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
  return f"host: {len(os.sched_getaffinity(0))} cores usable of {os.cpu_count()}, {model}; load average {load}"


def reps_for(nbytes: int) -> int:
  return max(3, min(50, (64 << 20) // max(nbytes, 1)))


def run_job(argvs, envs, timeout=900, prefixes=None) -> dict[int, tuple[float, float]]:
  """`prefixes[r]` runs rank r under a command (nsenter into its host)."""
  prefixes = prefixes or [[] for _ in argvs]
  procs = [subprocess.Popen(pre + a, env=e, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True) for pre, a, e in zip(prefixes, argvs, envs)]
  try:
    out, _ = procs[0].communicate(timeout=timeout)
    for p in procs[1:]:
      p.wait(timeout=60)
    res = {}
    for line in out.splitlines():
      if line.startswith("RESULT "):
        _, b, best, med = line.split()
        res[int(b)] = (float(best), float(med))
    return res
  finally:
    kill_groups(procs)


def ours(n: int, sizes: list[int], transport: str, reps: int | None = None) -> dict:
  port = free_port()
  results = {}
  for nbytes in sizes:  # one job per size keeps the repetition count right for each
    base = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_")}
    envs = [dict(base, MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", MYPLUGIN_NUM_PROCESSES=str(n),
                 MYPLUGIN_PROCESS_ID=str(r), MYPLUGIN_TRANSPORT=transport) for r in range(n)]
    argvs = [[sys.executable, os.path.join(HERE, "collectives_worker.py"), str(reps or reps_for(nbytes)), str(nbytes)]] * n
    results.update(run_job(argvs, envs))
    port = free_port()
  return results


def raw(n: int, sizes: list[int], binary: str) -> dict:
  results = {}
  for nbytes in sizes:
    with tempfile.TemporaryDirectory() as store:
      argvs = [[binary, str(r), str(n), store, str(reps_for(nbytes)), str(nbytes)] for r in range(n)]
      results.update(run_job(argvs, [dict(os.environ)] * n))
  return results


def across_hosts(rounds: int, max_mb: int, binary: str) -> None:
  """2 namespaces x 2 processes: hierarchical vs Gloo whole vs raw Gloo."""
  sys.path.insert(0, os.path.join(ROOT, "tests"))
  from cluster.hosts import Cluster  # noqa: E402
  sizes = [1 << 20]
  while sizes[-1] < max_mb << 20:
    sizes.append(sizes[-1] * 4)
  n = 4
  with Cluster(2, ipv6=False) as c:
    hosts = [c.hosts[0], c.hosts[0], c.hosts[1], c.hosts[1]]
    pre = [["nsenter", f"--net=/run/netns/{h.ns}", "--"] for h in hosts]
    # A coordinator off loopback listens only with a token.
    base = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_")}
    base["MYPLUGIN_COORDINATOR_TOKEN"] = secrets.token_hex(8)

    def ours_across(transport):
      res = {}
      for nbytes in sizes:
        port = free_port()
        envs = [dict(base, MYPLUGIN_COORDINATOR_ADDRESS=f"{hosts[0].ipv4}:{port}", MYPLUGIN_NUM_PROCESSES=str(n),
                     MYPLUGIN_PROCESS_ID=str(r), MYPLUGIN_TRANSPORT=transport) for r in range(n)]
        argvs = [[sys.executable, os.path.join(HERE, "collectives_worker.py"), str(reps_for(nbytes)), str(nbytes)]] * n
        res.update(run_job(argvs, envs, prefixes=pre))
      return res

    def raw_across():
      res = {}
      for nbytes in sizes:
        with tempfile.TemporaryDirectory() as store:
          argvs = [[binary, str(r), str(n), store, str(reps_for(nbytes)), str(nbytes)] for r in range(n)]
          envs = [dict(os.environ, RAW_GLOO_HOSTNAME=h.ipv4) for h in hosts]
          res.update(run_job(argvs, envs, prefixes=pre))
      return res

    kinds = {"hierarchical": lambda: ours_across("hierarchical"), "gloo": lambda: ours_across("gloo"),
             "raw": raw_across}
    got = {k: {b: [] for b in sizes} for k in kinds}
    for _ in range(rounds):  # interleaved
      for k, f in kinds.items():
        for b, v in f().items():
          got[k][b].append(v)
  factor = 2 * (n - 1) / n
  print(f"\n2 hosts x 2 processes: all-reduce f32, bus bandwidth GB/s (best / median of {rounds} interleaved "
        "rounds; time of the best call in brackets)")
  print("| size | myplugin hierarchical | myplugin Gloo (whole) | raw Gloo ring | hier/Gloo (best, median) | hier/raw (best, median) |")
  print("|---|---|---|---|---|---|")
  for b in sizes:
    if not all(got[k][b] for k in kinds):
      print(f"| {b} | missing | | | | |")
      continue
    cols = [(min(t for t, _ in got[k][b]), statistics.median(m for _, m in got[k][b])) for k in kinds]
    bw = lambda t: b / t * factor / 1e9
    cells = " | ".join(f"{bw(best):.3f} / {bw(med):.3f} ({best * 1e6:.0f} us)" for best, med in cols)
    (hb, hm), (gb, gm), (rb, rm) = cols
    print(f"| {b >> 20} MB | {cells} | {gb / hb:.2f}, {gm / hm:.2f} | {rb / hb:.2f}, {rm / hm:.2f} |", flush=True)


def memcpy_gbps() -> float:
  a = np.ones(256 << 20, np.uint8)
  b = np.empty_like(a)
  best = min(_time(lambda: np.copyto(b, a)) for _ in range(5))
  return a.nbytes / best / 1e9


def _time(f) -> float:
  t0 = time.perf_counter()
  f()
  return time.perf_counter() - t0


def label(nbytes: int) -> str:
  return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def arguments(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser()
  parser.add_argument("--processes", default="2,4")
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--max-mb", type=int, default=64)
  parser.add_argument("--latency", action="store_true", help="4 KB all-reduce latency only (no raw Gloo)")
  parser.add_argument("--transports", default="shm,gloo", help="for --latency")
  parser.add_argument("--hosts", action="store_true", help="2 namespaces x 2 processes, 1-64 MB (needs root)")
  parser.add_argument("--raw-gloo", metavar="PATH", help="a raw_gloo_allreduce built before (default: build one)")
  parser.add_argument("--build-raw-gloo", metavar="DIR", help="only build raw_gloo_allreduce in DIR; print its path")
  parser.add_argument("--plan", action="store_true", help="print the jobs of the all-reduce table; run none")
  args = parser.parse_args(argv)
  try:
    args.processes = [int(x) for x in args.processes.split(",")]
  except ValueError:
    parser.error(f"--processes takes counts separated by commas, not {args.processes!r}")
  if min(args.processes) < 2:
    parser.error(f"--processes: an all-reduce needs at least 2 processes, got {args.processes}")
  if args.rounds < 1 or args.max_mb < 1:
    parser.error(f"--rounds and --max-mb must be at least 1, got {args.rounds} and {args.max_mb}")
  if args.plan and (args.latency or args.hosts):
    parser.error("--plan describes the all-reduce table, not --latency or --hosts")
  if args.raw_gloo is not None and not args.plan and not (os.path.isfile(args.raw_gloo) and
                                                          os.access(args.raw_gloo, os.X_OK)):
    parser.error(f"--raw-gloo {args.raw_gloo}: not an executable file (build one: --build-raw-gloo DIR)")
  return args


def main():
  args = arguments()
  # A hard timeout around the run (ci/gpu_tests.sh) sends SIGTERM: unwind,
  # so that run_job kills the ranks' process groups on the way out.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
  if args.build_raw_gloo:
    print(build_raw_gloo(os.path.abspath(args.build_raw_gloo)))
    return
  if args.hosts:
    across_hosts(args.rounds, args.max_mb, args.raw_gloo or build_raw_gloo())
    return
  if args.latency:
    for n in args.processes:
      transports = args.transports.split(",")
      rounds = {t: [] for t in transports}
      for _ in range(args.rounds):  # interleaved
        for t in transports:
          rounds[t].append(ours(n, [4096], t, reps=2000)[4096])
      for t in transports:
        print(f"{n} processes, {t}, 4 KB all-reduce, {args.rounds} rounds of 2000 calls: best "
              f"{min(b for b, _ in rounds[t]) * 1e6:.1f} us; median per round (us): "
              + ", ".join(f"{m * 1e6:.1f}" for _, m in rounds[t]), flush=True)
    return
  sizes = []
  s = 4096
  while s <= args.max_mb << 20:
    sizes.append(s)
    s *= 4
  if args.plan:
    binary = args.raw_gloo or "built here with CMake"
    if args.raw_gloo and not os.access(args.raw_gloo, os.X_OK):
      binary += " (not there yet)"
    print(f"plan: {args.processes} processes x {args.rounds} rounds x 3 kinds (shm, Gloo, raw Gloo) x "
          f"{len(sizes)} sizes ({label(sizes[0])} to {label(sizes[-1])}) = "
          f"{len(args.processes) * args.rounds * 3 * len(sizes)} jobs; raw Gloo: {binary}")
    return
  binary = args.raw_gloo or build_raw_gloo()
  print(host(), flush=True)
  limit = memcpy_gbps()
  print(f"memcpy: {limit:.1f} GB/s (256 MB, best of 5); rounds: {args.rounds}, interleaved")
  for n in args.processes:
    factor = 2 * (n - 1) / n
    shm, gloo, theirs = {b: [] for b in sizes}, {b: [] for b in sizes}, {b: [] for b in sizes}
    for _ in range(args.rounds):
      for b, v in ours(n, sizes, "shm").items():
        shm[b].append(v)
      for b, v in ours(n, sizes, "gloo").items():
        gloo[b].append(v)
      for b, v in raw(n, sizes, binary).items():
        theirs[b].append(v)
    print(f"\n{n} processes: all-reduce f32, bus bandwidth GB/s (best / median; time of the best call in brackets)")
    print("| size | myplugin shm | myplugin Gloo | raw Gloo ring | shm/raw (best, median) | shm/memcpy (best) |")
    print("|---|---|---|---|---|---|")
    over_raw, share_64mb, time_4kb = {}, None, None
    for b in sizes:
      if not shm[b] or not gloo[b] or not theirs[b]:
        print(f"| {b} | missing | | | | |")
        continue
      cols = [(min(t for t, _ in v[b]), statistics.median(m for _, m in v[b])) for v in (shm, gloo, theirs)]
      bw = lambda t: b / t * factor / 1e9
      cells = " | ".join(f"{bw(best):.3f} / {bw(med):.3f} ({best * 1e6:.0f} us)" for best, med in cols)
      (sb, sm), _, (rb, rm) = cols
      print(f"| {label(b)} | {cells} | {rb / sb:.2f}, {rm / sm:.2f} | {bw(sb) / limit:.3f} |", flush=True)
      if b >= 1 << 20:
        over_raw[b] = rb / sb
      share_64mb = bw(sb) / limit if b == 64 << 20 else share_64mb
      time_4kb = sb if b == 4096 else time_4kb
    print(goal(n, over_raw, share_64mb, time_4kb), flush=True)


def goal(n: int, over_raw: dict, share_64mb: float | None, time_4kb: float | None) -> str:
  """One line against issue 16's goal, for the sizes this run measured."""
  verdict = lambda ok: "met" if ok else "NOT met"
  parts = []
  if over_raw:
    worst = min(over_raw, key=over_raw.get)
    parts.append(f">= {GOAL_OVER_RAW:g}x raw Gloo at every size from 1 MB: {over_raw[worst]:.2f}x at worst "
                 f"({label(worst)}), {verdict(over_raw[worst] >= GOAL_OVER_RAW)}")
  if share_64mb is not None:
    parts.append(f">= {GOAL_MEMCPY_SHARE_64MB:.0%} of memcpy at 64 MB: {share_64mb:.1%}, "
                 f"{verdict(share_64mb >= GOAL_MEMCPY_SHARE_64MB)}")
  if time_4kb is not None:
    parts.append(f"<= {GOAL_4KB_S * 1e6:.0f} us at 4 KB: {time_4kb * 1e6:.0f} us, {verdict(time_4kb <= GOAL_4KB_S)}")
  return f"goal (issue 16), {n} processes, shm on the best call: " + ("; ".join(parts) or "no size of the goal measured")


if __name__ == "__main__":
  main()

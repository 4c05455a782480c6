"""jax.device_put from one process's device to another's (cross-host
transfer): time per size against numpy's copy of the same bytes (memcpy),
and the coordination service's memory while it runs.

A job of 2 processes x 1 device (bench/cross_host_transfers_worker.py) with
the coordination service on its own (myplugin-coordinator), so that its
memory is its own: sampled every 20 ms, its peak over its resident size
before the job's first transfer is reported. Sizes are MiB of float32;
rounds per size are best-of-N and median.

usage: python bench/cross_host_transfers.py [--sizes 1,64,1024] [--rounds 5] [--hosts] [--label TEXT]
--hosts puts the two processes in two network namespaces on a bridge
(tests/cluster/hosts.py; needs root), so the bytes cross a veth pair.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402
ROOT = os.path.dirname(HERE)
# Issue 41's goal within one host, from 64 MiB: this share of memcpy.
GOAL_MEMCPY_SHARE = 0.4


def rss_kib(pid: int) -> int:
  try:
    with open(f"/proc/{pid}/status") as f:
      return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
  except (OSError, StopIteration):
    return 0


def run(sizes: list[int], rounds: int, hosts) -> tuple[list[dict], int]:
  port = free_port()
  base = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_") and k != "JAX_PLATFORMS"}
  base.update(JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_TOKEN=secrets.token_hex(8),
              MYPLUGIN_COORDINATOR_STANDALONE="1", MYPLUGIN_NUM_DEVICES="1")
  pre = [[] for _ in range(3)]
  address = f"127.0.0.1:{port}"
  if hosts is not None:
    pre = [["nsenter", f"--net=/run/netns/{h.ns}", "--"] for h in (hosts[0], hosts[0], hosts[1])]
    address = f"{hosts[0].ipv4}:{port}"
  coord = subprocess.Popen(pre[0] + [sys.executable, "-m", "jax_plugin.coordinator_cli", "--port", str(port),
                                     "--num-processes", "2"], env=base, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
  procs = [coord]
  peak = [0]
  stop = threading.Event()

  def sample():
    while not stop.is_set():
      peak[0] = max(peak[0], rss_kib(coord.pid))
      time.sleep(0.02)

  try:
    time.sleep(1.0)
    baseline = rss_kib(coord.pid)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for r in range(2):
      env = dict(base, MYPLUGIN_COORDINATOR_ADDRESS=address, MYPLUGIN_NUM_PROCESSES="2", MYPLUGIN_PROCESS_ID=str(r))
      procs.append(subprocess.Popen(pre[r + 1] + [sys.executable, os.path.join(HERE, "cross_host_transfers_worker.py"),
                                                  ",".join(map(str, sizes)), str(rounds)],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True, cwd="/tmp"))
    out, err = procs[2].communicate(timeout=1800)
    procs[1].wait(timeout=120)
    stop.set()
    results = [json.loads(l[len("RESULT "):]) for l in out.splitlines() if l.startswith("RESULT ")]
    if len(results) != len(sizes):
      sys.exit(f"the job failed:\n{out[-3000:]}\n{err[-3000:]}")
    return results, (peak[0] - baseline)
  finally:
    stop.set()
    kill_groups(procs)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--sizes", default="1,64,1024")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--hosts", action="store_true", help="the two processes in two network namespaces (root)")
  parser.add_argument("--label", default="", help="a name for this build's row (the path measured)")
  args = parser.parse_args()
  sizes = [int(s) for s in args.sizes.split(",")]
  if args.hosts:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from cluster.hosts import Cluster  # noqa: E402
    with Cluster(2, ipv6=False) as c:
      results, service = run(sizes, args.rounds, c.hosts)
  else:
    results, service = run(sizes, args.rounds, None)
  where = "2 network namespaces" if args.hosts else "one host"
  print(f"cross-host device_put, {where}{' (' + args.label + ')' if args.label else ''}: "
        f"best / median of {args.rounds}; x memcpy: against numpy's copy into a new array in process 1 "
        f"(x warm: into an array written before; x engine: the engine's copy into a new buffer on the device)")
  print(f"{'MiB':>6} {'best s':>9} {'median s':>9} {'GB/s best':>9} {'x memcpy':>8} {'x warm':>7} {'x engine':>8}  notes")
  for r in results:
    nbytes = r["mib"] << 20
    if r["error"]:
      print(f"{r['mib']:>6} {'-':>9} {'-':>9} {'-':>9} {'-':>8} {'-':>7} {'-':>8}  fails: {r['error']}")
      continue
    best, med = min(r["times"]), statistics.median(r["times"])
    share = r["memcpy"] / best
    goal = "" if r["mib"] < 64 or args.hosts else (
        "  goal met" if share >= GOAL_MEMCPY_SHARE else "  below goal")
    warm, engine = r["memcpy_warm"] / best, r.get("engine_copy", float("nan")) / best
    print(f"{r['mib']:>6} {best:>9.4f} {med:>9.4f} {nbytes / best / 1e9:>9.3f} {share:>8.3f} {warm:>7.3f} "
          f"{engine:>8.3f}{goal}")
  print(f"coordination service: peak resident memory {service / 1024:.1f} MiB above its start")


if __name__ == "__main__":
  main()

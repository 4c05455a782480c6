"""Coordination benchmark.

1. Registration: the time of the initialize call itself (imports excluded:
   every process imports, reports ready, and all start together) for 2, 8,
   32 and 64 local processes; myplugin's jax_plugin.distributed.initialize
   against jax.distributed.initialize on jax's CPU backend, interleaved.
2. Failure detection: from SIGKILL / SIGSTOP of one process until every
   other process has exited, against the configured heartbeat timeout.
3. Shutdown of a finished job: 8 processes that have joined and done their
   work are told to return at the same instant; the time until the last one
   has exited (the shutdown barrier, the service's stop, the interpreter's
   teardown). Joined through jax_plugin.distributed, through an unmodified
   jax.distributed.initialize served by ours, and on jax's own service.

usage: python bench/coordination.py [--counts 2,8,32,64] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402


def env_for(impl: str) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_")}
  env["JAX_PLATFORMS"] = "cpu" if impl == "jax" else "myplugin"
  return env


def registration_round(impl: str, n: int, timeout: float = 600) -> tuple[float, float]:
  """(median, max) of the initialize call across the n processes."""
  with tempfile.TemporaryDirectory() as tmp:
    ready, go = os.path.join(tmp, "ready"), os.path.join(tmp, "go")
    os.mkdir(ready)
    address = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "coordination_worker.py"), impl, address, str(n),
                               str(i), ready, go], env=env_for(impl), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True) for i in range(n)]
    try:
      deadline = time.monotonic() + timeout
      while len(os.listdir(ready)) < n:
        if time.monotonic() > deadline or any(p.poll() not in (None,) for p in procs):
          raise RuntimeError(f"{impl}: processes did not get ready")
        time.sleep(0.01)
      open(go, "w").close()
      times = []
      for p in procs:
        out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        times += [float(l.split()[1]) for l in out.splitlines() if l.startswith("INIT ")]
      if len(times) != n:
        raise RuntimeError(f"{impl}: only {len(times)} of {n} processes initialized")
      return statistics.median(times), max(times)
    finally:
      kill_groups(procs)


LOOP = """
import os, sys, time
from jax_plugin import distributed
distributed.initialize(heartbeat_timeout_seconds=float(sys.argv[1]))
print("READY", flush=True)
while True:
  distributed.barrier("b", timeout=600)
  time.sleep(0.01)
"""


def detection_round(sig: int, heartbeat: float, n: int = 4) -> float:
  """Seconds from the signal until every other process has exited."""
  port = free_port()
  procs = []
  for i in range(n):
    env = env_for("ours")
    env.update(MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", MYPLUGIN_NUM_PROCESSES=str(n),
               MYPLUGIN_PROCESS_ID=str(i))
    procs.append(subprocess.Popen([sys.executable, "-c", LOOP, str(heartbeat)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, start_new_session=True))
  try:
    for p in procs:
      assert p.stdout.readline().strip() == "READY"
    time.sleep(0.5)
    victim = procs[n - 1]
    os.killpg(victim.pid, sig)
    t0 = time.monotonic()
    for p in procs[:-1]:
      p.wait(timeout=heartbeat + 60)
    return time.monotonic() - t0
  finally:
    kill_groups(procs)


FINISH = """
import atexit, os, sys, time
how, address, n, pid, ready, go = sys.argv[1:7]
# Registered first, so it runs last: when every shutdown hook is done.
atexit.register(lambda: open(os.path.join(ready, pid + ".done"), "w").write(repr(time.monotonic())))
if how == "none":  # no job: the interpreter's teardown alone
  import jax
  jax.devices()
elif how == "ours":
  from jax_plugin import distributed
  distributed.initialize(address, int(n), int(pid))
else:
  import jax
  jax.distributed.initialize(coordinator_address=address, num_processes=int(n), process_id=int(pid))
  jax.devices()
open(os.path.join(ready, pid), "w").close()
while not os.path.exists(go):
  time.sleep(0.001)
"""


def shutdown_round(how: str, n: int = 8, timeout: float = 300) -> tuple[float, float]:
  """Seconds from 'return now' until the last of n finished processes (1) had
  run every exit hook (shutdown done), (2) had exited."""
  with tempfile.TemporaryDirectory() as tmp:
    ready, go = os.path.join(tmp, "ready"), os.path.join(tmp, "go")
    os.mkdir(ready)
    address = f"127.0.0.1:{free_port()}"
    env = env_for("jax" if how == "jax" else "ours")
    procs = [subprocess.Popen([sys.executable, "-c", FINISH, how, address, str(n), str(i), ready, go], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for i in range(n)]
    try:
      deadline = time.monotonic() + timeout
      while len(os.listdir(ready)) < n:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
          raise RuntimeError(f"{how}: processes did not get ready")
        time.sleep(0.01)
      time.sleep(0.2)  # all idle in their wait loop
      t0 = time.monotonic()
      open(go, "w").close()
      for p in procs:
        if p.wait(timeout=timeout) != 0:
          raise RuntimeError(f"{how}: a process exited with {p.returncode}")
      exited = time.monotonic() - t0
      done = max(float(open(os.path.join(ready, f"{i}.done")).read()) for i in range(n)) - t0
      return done, exited
    finally:
      kill_groups(procs)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--counts", default="2,8,32,64")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--only-shutdown", action="store_true")
  args = parser.parse_args()
  counts = [int(c) for c in args.counts.split(",")]

  if not args.only_shutdown:
    registration_and_detection(counts, args.rounds)
  print()
  print("shutdown of a finished job, 8 processes: seconds from 'return now' until the last one had run its exit")
  print(f"hooks (shutdown done), and until it had exited (the interpreter's teardown too); median of {args.rounds}")
  print("| joined through | shutdown done (worst round) | exited (worst round) |")
  print("|---|---|---|")
  for how, name in (("ours", "jax_plugin.distributed.initialize, no jax import"),
                    ("ours-jax", "unmodified jax.distributed.initialize, served by myplugin"),
                    ("jax", "jax.distributed.initialize on jax's own service (JAX_PLATFORMS=cpu)"),
                    ("none", "no job: 8 processes that import jax and exit")):
    rounds = [shutdown_round(how) for _ in range(args.rounds)]
    done, exited = [d for d, _ in rounds], [e for _, e in rounds]
    print(f"| {name} | {statistics.median(done):.2f} s ({max(done):.2f}) | {statistics.median(exited):.2f} s "
          f"({max(exited):.2f}) |", flush=True)


def registration_and_detection(counts, rounds):
  args = argparse.Namespace(rounds=rounds)
  print(f"registration: the initialize call, imports excluded; best / median of {args.rounds} interleaved rounds")
  print("| processes | myplugin median call | myplugin slowest call | jax median call | jax slowest call | "
        "ratio myplugin/jax (median call) |")
  print("|---|---|---|---|---|---|")
  for n in counts:
    ours, theirs = [], []
    for _ in range(args.rounds):
      ours.append(registration_round("ours", n))
      theirs.append(registration_round("jax", n))
    om = statistics.median(m for m, _ in ours)
    ox = statistics.median(x for _, x in ours)
    jm = statistics.median(m for m, _ in theirs)
    jx = statistics.median(x for _, x in theirs)
    print(f"| {n} | {om * 1e3:.1f} ms (best {min(m for m, _ in ours) * 1e3:.1f}) | {ox * 1e3:.1f} ms "
          f"| {jm * 1e3:.1f} ms (best {min(m for m, _ in theirs) * 1e3:.1f}) | {jx * 1e3:.1f} ms | {om / jm:.3f} |",
          flush=True)

  print()
  print("failure detection, 4 processes in a barrier loop: seconds from the signal until all others exited")
  print("| fault | heartbeat timeout | best | median |")
  print("|---|---|---|---|")
  for sig, name in ((signal.SIGKILL, "SIGKILL"), (signal.SIGSTOP, "SIGSTOP")):
    for hb in (2.0, 5.0):
      times = [detection_round(sig, hb) for _ in range(args.rounds)]
      print(f"| {name} | {hb:g} s | {min(times):.2f} s | {statistics.median(times):.2f} s |", flush=True)


if __name__ == "__main__":
  main()

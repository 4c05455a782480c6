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

4. Load (--load): a job of 64 processes doing key-value sets, blocking gets
   and barriers, with and without 1,000 idle connections plus 200 hostile
   ones (slow readers, garbage, half-open, oversize length prefixes, wrong
   tokens) held against its service; unloaded, loaded and control phases
   interleaved over several rounds (each round starting with another), each
   call's latency, best and median, the ratio of the loaded median to the
   unloaded one (pooled, and round by round) and a verdict on the 2x goal.
   A control phase runs the same load against a stand-in server instead,
   to tell what the load generator's own CPU costs the job on a small
   machine. A round whose load generator did not get its connections up is
   reported and left out.

usage: python bench/coordination.py [--counts 2,8,32,64] [--rounds 3]
       python bench/coordination.py --load [--processes 64] [--idle 1000] [--hostile 200] [--rounds 5]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import select
import struct
import threading
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


# --- 4. load ------------------------------------------------------------------

LOAD_SERVICE = """
import resource, sys
from jax_plugin import _myplugin
need = int(sys.argv[2]) + 64
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < need:
  resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
s = _myplugin.CoordinationService.start("127.0.0.1", 0, int(sys.argv[1]), "bench-token", 60.0, 600.0)
print(s.port, resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
sys.stdin.readline()
print("FAILURE", s.failure(), "REFUSED", s.refused_connections(), flush=True)
s.stop()
"""

LOAD_WORKER = """
import json, os, sys, time
from jax_plugin import distributed
flags, calls = sys.argv[1], int(sys.argv[2])
distributed.initialize()
pid, n = distributed.process_id(), distributed.num_processes()
print("READY", flush=True)
phase = 0
while True:
  go = os.path.join(flags, f"go-{phase}")
  while not os.path.exists(go):
    if os.path.exists(os.path.join(flags, "end")):
      distributed.shutdown()
      sys.exit(0)
    time.sleep(0.005)
  lat = {"set": [], "get": [], "barrier": []}
  for i in range(calls):
    t0 = time.perf_counter()
    distributed.key_value_set(f"p{phase}/{pid}/{i}", b"v" * 64)
    t1 = time.perf_counter()
    distributed.key_value_get(f"p{phase}/{(pid + 1) % n}/{i}", timeout=120)
    t2 = time.perf_counter()
    distributed.barrier(f"p{phase}/{i}", timeout=120)
    t3 = time.perf_counter()
    lat["set"].append(t1 - t0)
    lat["get"].append(t2 - t1)
    lat["barrier"].append(t3 - t2)
  print("PHASE " + json.dumps(lat), flush=True)
  phase += 1
"""

# The control of the load phases: a stand-in that treats connections the
# way the service does (an error frame once a peer sends, a drop after 10 s
# of silence), so that the load generator does the same work against it
# while the job's service is left alone.
DECOY = """
import asyncio, resource, struct, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(int(sys.argv[1]), hard), hard))
ERROR = (lambda body: struct.pack("<I", len(body)) + body)(struct.pack("<BII", 3, 0, 16) + struct.pack("<I", 5) + b"decoy")
async def serve(r, w):
  try:
    if await asyncio.wait_for(r.read(4096), 10):
      w.write(ERROR)
      await w.drain()
  except Exception:
    pass
  w.close()
async def main():
  server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
  print(server.sockets[0].getsockname()[1], flush=True)
  await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
asyncio.run(main())
"""

MAGIC = 0x4D59504C


def _hello(token: bytes) -> bytes:
  body = struct.pack("<BIIH", 1, 0, MAGIC, 1) + struct.pack("<I", len(token)) + token + struct.pack("<I", 0)
  return struct.pack("<I", len(body)) + body


class Load:
  """Idle and hostile connections against one service, from an asyncio loop
  on a thread of this process (the job's processes and the service are
  other processes)."""

  KINDS = ("slow_reader", "garbage", "half_open", "oversize", "wrong_token")

  def __init__(self, port: int, idle: int, hostile: int):
    self.port, self.idle, self.hostile = port, idle, hostile
    self.stop = None
    self.opened = 0
    self.errors = collections.Counter()  # why opening a connection failed, by kind
    self.loop = asyncio.new_event_loop()
    self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)

  async def _open(self):
    r, w = await asyncio.open_connection("127.0.0.1", self.port)
    self.opened += 1
    return r, w

  async def _idle(self):
    while not self.stop.is_set():  # held open; the service drops it after its Hello timeout: open another
      try:
        r, w = await self._open()
        waits = [asyncio.ensure_future(r.read(1)), asyncio.ensure_future(self.stop.wait())]
        try:
          await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
          for f in waits:
            f.cancel()
          w.close()
      except OSError as e:
        self.errors[f"{type(e).__name__}: {e}"[:80]] += 1
        await asyncio.sleep(0.1)

  async def _hostile(self, kind: str):
    while not self.stop.is_set():
      try:
        r, w = await self._open()
        if kind == "slow_reader":  # asks for an answer and never reads it
          w.write(_hello(b"wrong") * 4)
          await asyncio.sleep(2)
        elif kind == "garbage":
          w.write(os.urandom(64))
          await asyncio.wait_for(r.read(65536), 5)
        elif kind == "half_open":  # half a length prefix, then nothing
          w.write(b"\x10\x00")
          await asyncio.sleep(2)
        elif kind == "oversize":
          w.write(struct.pack("<I", 0xFFFFFFF0) + b"x" * 16)
          await asyncio.wait_for(r.read(65536), 5)
        else:
          w.write(_hello(b"not-the-token"))
          await asyncio.wait_for(r.read(65536), 5)
        w.close()
      except OSError as e:
        self.errors[f"{type(e).__name__}: {e}"[:80]] += 1
      except asyncio.TimeoutError:
        pass
      await asyncio.sleep(0.05)

  async def _main(self):
    self.stop = asyncio.Event()
    tasks = [asyncio.ensure_future(self._idle()) for _ in range(self.idle)]
    tasks += [asyncio.ensure_future(self._hostile(self.KINDS[i % len(self.KINDS)])) for i in range(self.hostile)]
    self.started.set()
    await self.stop.wait()
    for t in tasks:
      t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

  def __enter__(self):
    self.started = threading.Event()
    self.thread.start()
    self.started.wait(60)
    return self

  def __exit__(self, *exc):
    self.loop.call_soon_threadsafe(self.stop.set)
    self.thread.join(60)


def _cpu_seconds(pid: int) -> float:
  """User + system CPU time of a process so far."""
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


MODES = ("unloaded", "loaded", "control")
CALLS = ("set", "get", "barrier")


def _summary(values):
  return min(values), statistics.median(values)


def load_bench(n: int, idle: int, hostile: int, rounds: int, calls: int):
  # Descriptors: the service needs one per connection (+ a few); this
  # process one per idle or hostile connection it holds.
  need = idle + hostile + 64
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  if soft < need:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
  service = subprocess.Popen([sys.executable, "-c", LOAD_SERVICE, str(n), str(idle + hostile + n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             start_new_session=True)
  decoy = subprocess.Popen([sys.executable, "-c", DECOY, str(need)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, start_new_session=True)
  procs = [service, decoy]
  with tempfile.TemporaryDirectory() as flags:
    try:
      decoy_port = int(decoy.stdout.readline())
      port, service_nofile = (int(x) for x in service.stdout.readline().split())
      print(f"load: {n} processes; {idle} idle + {hostile} hostile connections in loaded phases; "
            f"descriptor soft limits: service {service_nofile}, load generator "
            f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
      for i in range(n):
        env = env_for("ours")
        env.update(MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", MYPLUGIN_NUM_PROCESSES=str(n),
                   MYPLUGIN_PROCESS_ID=str(i), MYPLUGIN_COORDINATOR_STANDALONE="1",
                   MYPLUGIN_COORDINATOR_TOKEN="bench-token")
        procs.append(subprocess.Popen([sys.executable, "-c", LOAD_WORKER, flags, str(calls)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      start_new_session=True))
      workers = procs[2:]
      for p in workers:
        if p.stdout.readline().strip() != "READY":
          raise RuntimeError("a worker did not start")
      # results[mode][call][round]: the latencies of that phase's calls.
      results = {m: {k: [[] for _ in range(rounds)] for k in CALLS} for m in MODES}
      service_cpu = {m: [] for m in MODES}  # the service's CPU use during the phases, in cores
      short = set()  # rounds in which the load generator did not get its connections up
      phase = 0
      for r in range(rounds):
        # Interleaved, and each round starts with another mode: a machine
        # that gets busier or quieter over the run favours no mode.
        for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
          def run_phase():
            cpu0, wall0 = _cpu_seconds(service.pid), time.monotonic()
            open(os.path.join(flags, f"go-{phase}"), "w").close()
            for p in workers:
              line = p.stdout.readline()
              if not line.startswith("PHASE "):
                raise RuntimeError(f"a worker failed in phase {phase}: {line!r}")
              for k, v in json.loads(line[6:]).items():
                results[mode][k][r] += v
            service_cpu[mode].append((_cpu_seconds(service.pid) - cpu0) / (time.monotonic() - wall0))
          if mode != "unloaded":
            with Load(port if mode == "loaded" else decoy_port, idle, hostile) as load:
              time.sleep(3)  # all connections up, hostile loops churning
              run_phase()
              print(f"  round {r} {mode} phase: {load.opened} connections opened by the load generator"
                    + (f"; errors {dict(load.errors)}" if load.errors else ""), flush=True)
              if load.opened < idle + hostile:
                short.add(r)
          else:
            run_phase()
          phase += 1
      open(os.path.join(flags, "end"), "w").close()
      for p in workers:
        p.wait(timeout=120)
      service.stdin.write("\n")
      service.stdin.flush()
      decoy.stdin.write("\n")
      decoy.stdin.flush()
      print("  service: " + service.stdout.readline().strip())
    finally:
      kill_groups(procs)
  print("  the service's CPU use during the phases (cores): " +
        "; ".join(m + " " + ", ".join(f"{c:.2f}" for c in service_cpu[m]) for m in MODES))
  _report_load(results, rounds, calls, n, short)


def _report_load(results, rounds: int, calls: int, n: int, short: set):
  """Best and median of each mode, and the verdict on the ratio of medians.
  Rounds whose load did not get up are left out of the verdict."""
  kept = [r for r in range(rounds) if r not in short]
  if short:
    print(f"  left out: rounds {sorted(short)} (the load generator opened fewer connections than it holds)")
  if not kept:
    print("verdict: no round had its load up; nothing measured")
    return
  pooled = {m: {k: [x for r in kept for x in results[m][k][r]] for k in CALLS} for m in MODES}
  print(f"latency of the job's calls (ms), {len(kept)} interleaved rounds x {calls} calls x {n} processes; control: "
        "the same load against a stand-in, not the service (what the load generator costs the job's processes); "
        "per round: that round's loaded median / its unloaded median, median of the rounds [lowest, highest]")
  print("| call | unloaded best / median | loaded best / median | control best / median | loaded/unloaded median "
        "| per round | loaded/control median |")
  print("|---|---|---|---|---|---|---|")
  verdict = []
  for k in CALLS:
    (ub, um), (lb, lm), (cb, cm) = (_summary(pooled[m][k]) for m in MODES)
    per_round = sorted(statistics.median(results["loaded"][k][r]) / statistics.median(results["unloaded"][k][r])
                       for r in kept)
    print(f"| {k} | {ub * 1e3:.2f} / {um * 1e3:.2f} | {lb * 1e3:.2f} / {lm * 1e3:.2f} | {cb * 1e3:.2f} / "
          f"{cm * 1e3:.2f} | {lm / um:.2f} | {statistics.median(per_round):.2f} [{per_round[0]:.2f}, "
          f"{per_round[-1]:.2f}] | {lm / cm:.2f} |")
    verdict.append((k, lm / um))
  ok = all(ratio <= 2 for _, ratio in verdict)
  print("verdict: loaded/unloaded median " + ", ".join(f"{k} {ratio:.2f}" for k, ratio in verdict) +
        (": within 2x" if ok else ": NOT within 2x"))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--counts", default="2,8,32,64")
  parser.add_argument("--rounds", type=int, default=None, help="3; 5 with --load")
  parser.add_argument("--only-shutdown", action="store_true")
  parser.add_argument("--load", action="store_true")
  parser.add_argument("--processes", type=int, default=64)
  parser.add_argument("--idle", type=int, default=1000)
  parser.add_argument("--hostile", type=int, default=200)
  parser.add_argument("--calls", type=int, default=20)
  args = parser.parse_args()
  if args.load:
    load_bench(args.processes, args.idle, args.hostile, args.rounds or 5, args.calls)
    return
  args.rounds = args.rounds or 3
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

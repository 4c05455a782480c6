"""Coordination at scale: 64 to 16,384 processes on one machine.

The service runs as users run it (the myplugin-coordinator CLI, its own
process, so its CPU and memory are read from /proc apart from the load);
the processes are simulated by bench/coordination_scale.cc (the CMake
target coordination_scale): real TCP connections speaking the real
protocol through the project's own codec, thousands on one epoll loop.
Each run measures, for one job size:

- registration: from every process connecting at once until the service
  has all of them (the first reply) and until every process has the job's
  topology (the last: each reply carries every process's topology, so the
  bytes grow with N^2, at a few bytes an entry; the size of one reply is
  topology_reply_bytes);
- the idle job (heartbeats only): the service's CPU (cores) and memory,
  and the heartbeat traffic (frames and bytes a second, both ways);
- a barrier of all (from the last arrival sent to the last release read,
  and from the first arrival sent), and key-value set then blocking get by
  every process;
- a death: one process closes its socket (or, in the frozen run, stops
  sending and reading under a 10 s heartbeat timeout): the time until
  every other process has the failure notice.

Several runs per size (one a frozen death), sizes interleaved run by run.
--impl jax runs the same points on jax's own coordination service
(jaxlib's distributed runtime service, and its clients, several per
process on threads) as far as this machine allows.

usage: python bench/coordination_scale.py [--counts 64,256,1024,4096,16384]
           [--runs 3] [--rounds 3] [--topology real|tiny] [--impl ours|jax]
           [--json out.json] [--build DIR | --generator PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402

FROZEN_HEARTBEAT_TIMEOUT_S = 10


def build_generator(build: str) -> str:
  """The coordination_scale target (the codec and the generator only: seconds)."""
  steps = [["cmake", "--build", build, "--target", "coordination_scale"]]
  if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
    steps.insert(0, ["cmake", "-S", ROOT, "-B", build, f"-DPython_EXECUTABLE={sys.executable}",
                     "-DCMAKE_BUILD_TYPE=Release"])
  for step in steps:
    p = subprocess.Popen(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
      out, _ = p.communicate(timeout=900)
    finally:
      kill_groups([p])
    if p.returncode != 0:
      sys.exit(f"building coordination_scale failed: {' '.join(step)}\n{out[-3000:]}")
  return os.path.join(build, "coordination_scale")


def raise_nofile() -> None:
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wait_for_line(proc: subprocess.Popen, log, word: str, timeout: float) -> str:
  """The line of `log` (a file the process writes) with `word` in it."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    log.seek(0)
    for line in log.read().splitlines():
      if word in line:
        return line
    if proc.poll() is not None:
      break
    time.sleep(0.05)
  raise RuntimeError(f"the service did not say {word!r} within {timeout} s")


def run_ours(generator: str, n: int, death: str, rounds: int, topology: str, idle_s: float,
             frozen_timeout: float, io_threads: int = 0) -> dict:
  port = free_port()
  env = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_")}
  env["MYPLUGIN_COORDINATOR_TOKEN"] = "scale-bench"
  cli = [sys.executable, "-m", "jax_plugin.coordinator_cli", "--port", str(port), "--num-processes", str(n),
         "--bind", "127.0.0.1", "--io-threads", str(io_threads)]
  if death == "frozen":
    cli += ["--heartbeat-timeout", str(frozen_timeout)]
  # Its log goes to a file: a pipe nobody reads would stop the service
  # once full (it logs under its state lock).
  log = tempfile.TemporaryFile("w+")
  service = subprocess.Popen(cli, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, cwd="/")
  try:
    wait_for_line(service, log, "listening", 60)
    rss_before = proc_rss_kib(service.pid)
    gen = subprocess.run([generator, "--port", str(port), "--token", "scale-bench", "--num-processes", str(n),
                          "--death", death, "--rounds", str(rounds), "--topology", topology, "--idle-seconds",
                          str(idle_s), "--service-pid", str(service.pid), "--phase-timeout", "300"],
                         capture_output=True, text=True, timeout=900, start_new_session=True)
    if not gen.stdout.strip():
      raise RuntimeError(f"the generator said nothing (exit {gen.returncode}): {gen.stderr[-2000:]}")
    result = json.loads(gen.stdout.strip().splitlines()[-1])
    result["rss_before_kib"] = rss_before
    result["impl"] = "ours"
    result["io_threads"] = io_threads
    if result.get("problems"):
      log.seek(0)
      result["service_log"] = [line[:300] for line in log.read().splitlines()[-5:]]
    return result
  finally:
    kill_groups([service])
    service.wait()
    log.close()


def proc_rss_kib(pid: int) -> int:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1])
  return -1


def proc_cpu_s(pid: int) -> float:
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- jax's own service, the reference --------------------------------------

JAX_SERVICE = r"""
import sys, time
from jax._src.lib import _jax
n, port, hb = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = _jax.get_distributed_runtime_service(f"127.0.0.1:{port}", n, heartbeat_timeout=hb,
                                          cluster_register_timeout=600, shutdown_timeout=60)
print("listening", flush=True)
time.sleep(100000)
"""

# One process of the load: `count` clients (ids first..), each on its own
# thread, step by step on the driver's word (a line on stdin), each step's
# per-client end time (time.time()) reported on stdout as JSON.
JAX_CLIENTS = r"""
import json, sys, threading, time
from jax._src.lib import _jax
port, first, count, n, rounds, hb = (int(a) for a in sys.argv[1:7])
# No missed_heartbeat_callback: jaxlib 0.10.2 ends the process with
# std::bad_cast when it calls one. Without it a client that hears of a
# peer's failure ends its process, which is how this process tells.
def make(i):
  return _jax.get_distributed_runtime_client(f"127.0.0.1:{port}", i, init_timeout=600, heartbeat_timeout=hb,
                                             shutdown_on_destruction=False)
clients = {i: make(i) for i in range(first, first + count)}
def all_do(f):
  ends, errs = {}, []
  def one(i):
    try:
      f(i, clients[i])
      ends[i] = time.time()
    except Exception as e:
      errs.append(f"{i}: {e}")
  ts = [threading.Thread(target=one, args=(i,)) for i in clients]
  for t in ts: t.start()
  for t in ts: t.join()
  return ends, errs
def report(step, ends, errs):
  print(json.dumps({"step": step, "ends": list(ends.values()), "errors": errs[:3], "n_errors": len(errs)}), flush=True)
for line in sys.stdin:
  step = line.strip()
  if step == "connect":
    report(step, *all_do(lambda i, c: c.connect()))
  elif step.startswith("barrier"):
    report(step, *all_do(lambda i, c: c.wait_at_barrier(step, 300000)))
  elif step.startswith("kv"):
    def kv(i, c):
      c.key_value_set(f"{step}/{i}", f"value {i}")
      peer = (i + 1) % n
      assert c.blocking_key_value_get(f"{step}/{peer}", 300000) == f"value {peer}"
    report(step, *all_do(kv))
"""


def run_jax(n: int, rounds: int, per_process: int, idle_s: float) -> dict:
  """Registration, idle, barriers, key-value and a SIGKILLed process on jax's service."""
  port = free_port()
  hb = FROZEN_HEARTBEAT_TIMEOUT_S
  env = {k: v for k, v in os.environ.items() if not k.startswith(("MYPLUGIN_", "JAX_"))}
  env["JAX_PLATFORMS"] = "cpu"
  procs = []
  log = tempfile.TemporaryFile("w+")
  service = subprocess.Popen([sys.executable, "-c", JAX_SERVICE, str(n), str(port), str(hb)], env=env,
                             stdout=log, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
  procs.append(service)
  result: dict = {"impl": "jax", "num_processes": n}
  try:
    wait_for_line(service, log, "listening", 120)
    result["rss_before_kib"] = proc_rss_kib(service.pid)
    # The last process holds one client alone: the one that dies.
    groups = [(first, min(per_process, n - 1 - first)) for first in range(0, n - 1, per_process)] + [(n - 1, 1)]
    loads = []
    for first, count in groups:
      loads.append(subprocess.Popen([sys.executable, "-c", JAX_CLIENTS, str(port), str(first), str(count), str(n),
                                     str(rounds), str(hb)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, start_new_session=True))
    procs += loads

    def step(name: str, who=None, timeout=600) -> tuple[list[float], int]:
      who = who or loads
      t0 = time.time()
      for p in who:
        p.stdin.write(name + "\n")
        p.stdin.flush()
      ends, errors = [], 0
      for p in who:
        line = readline_within(p, timeout)
        r = json.loads(line)
        ends += r["ends"]
        errors += r.get("n_errors", 0)
      return [e - t0 for e in ends], errors  # from the step's start

    time.sleep(3)  # the interpreters and jaxlib imported
    ends, errors = step("connect")
    result["registration_s"] = max(ends) if ends else None
    result["registered"] = len(ends)
    cpu0, t0 = proc_cpu_s(service.pid), time.monotonic()
    time.sleep(idle_s)
    result["idle_cpu_cores"] = (proc_cpu_s(service.pid) - cpu0) / (time.monotonic() - t0)
    result["rss_kib"] = proc_rss_kib(service.pid)
    result["threads"] = int(open(f"/proc/{service.pid}/status").read().split("Threads:")[1].split()[0])
    result["barrier_total_s"], result["kv_set_get_s"] = [], []
    for r in range(rounds):
      ends, errors = step(f"barrier{r}")
      result["barrier_total_s"].append(max(ends))
      result["barrier_errors"] = result.get("barrier_errors", 0) + errors
    for r in range(rounds):
      ends, errors = step(f"kv{r}")
      result["kv_set_get_s"].append(max(ends))
      result["kv_errors"] = result.get("kv_errors", 0) + errors
    # The death: the lone client's process is killed (its sockets closed);
    # jax's service finds it by its heartbeats, and each other process
    # ends when one of its clients hears (so this is the time until the
    # last load process has ended, a little early for its other clients).
    t_death = time.monotonic()
    os.killpg(loads[-1].pid, signal.SIGKILL)
    deadline = t_death + 3 * hb + 60
    ended: dict[int, float] = {}
    while time.monotonic() < deadline and len(ended) < len(loads) - 1:
      for i, p in enumerate(loads[:-1]):
        if i not in ended and p.poll() is not None:
          ended[i] = time.monotonic() - t_death
      time.sleep(0.02)
    result["death"] = "killed"
    result["death_heartbeat_timeout_s"] = hb
    result["death_told"] = sum(count for i, (first, count) in enumerate(groups[:-1]) if i in ended)
    result["death_all_s"] = max(ended.values()) if len(ended) == len(loads) - 1 else None
    return result
  finally:
    kill_groups(procs)
    for p in procs:
      p.wait()
    log.close()


def readline_within(p: subprocess.Popen, timeout: float) -> str:
  out: list[str] = []
  t = threading.Thread(target=lambda: out.append(p.stdout.readline()), daemon=True)
  t.start()
  t.join(timeout)
  if not out or not out[0]:
    raise RuntimeError(f"a load process said nothing within {timeout} s")
  return out[0]


# --- the report ---------------------------------------------------------------

def med(xs):
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else None


def summarize(results: list[dict]) -> list[dict]:
  rows = []
  for impl, loops in sorted({(r["impl"], r.get("io_threads", 0)) for r in results}, key=lambda k: (k[0] != "ours", k)):
    for n in sorted({r["num_processes"] for r in results if r["impl"] == impl}):
      rs = [r for r in results if r["impl"] == impl and r["num_processes"] == n and r.get("io_threads", 0) == loops]
      if not rs:
        continue
      closed = [r for r in rs if r.get("death") in ("closed", "killed")]
      frozen = [r for r in rs if r.get("death") == "frozen"]
      rows.append({
          # An explicit number of the service's event loops (--io-threads); 0 is its default.
          "impl": f"{impl}, {loops} loop{'s' if loops > 1 else ''}" if loops else impl, "n": n, "runs": len(rs),
          # jax's connect() registers; its topology exchange is a later step (the PJRT client's).
          "registered_s": med([r.get("registration_s" if impl == "jax" else "first_topology_s") for r in rs]),
          "registration_s": med([r.get("registration_s") for r in rs]) if impl == "ours" else None,
          "barrier_release_s": med([x for r in rs for x in r.get("barrier_release_s", [])]),
          "barrier_total_s": med([x for r in rs for x in r.get("barrier_total_s", [])]),
          "barrier_service_cpu_s": med([r.get("barrier_service_cpu_s") for r in rs]),
          "kv_set_get_s": med([x for r in rs for x in r.get("kv_set_get_s", [])]),
          "death_closed_s": med([r.get("death_all_s") for r in closed]),
          "death_frozen_s": med([r.get("death_all_s") for r in frozen]),
          "idle_cpu_cores": med([r.get("idle_cpu_cores") for r in rs if r.get("death") != "frozen"]),
          "rss_mib": med([r.get("rss_kib", 0) / 1024 for r in rs]),
          "threads": med([r.get("threads") for r in rs]),
          "heartbeat_frames_per_s": med([r.get("heartbeat_frames_per_s") for r in rs if r.get("death") != "frozen"]),
          "heartbeat_bytes_per_s": med([r.get("heartbeat_bytes_per_s") for r in rs if r.get("death") != "frozen"]),
          "problems": sum(r.get("problems", 0) + r.get("barrier_errors", 0) + r.get("kv_errors", 0) for r in rs),
      })
  return rows


def fmt(x, unit=""):
  if x is None:
    return "—"
  if isinstance(x, float):
    if unit == "ms":
      return f"{x * 1000:.1f}"
    return f"{x:.3g}"
  return str(x)


def table(rows: list[dict]) -> str:
  head = ("| impl | processes | all registered (s) | all have topology (s) | barrier release (ms) | barrier total (ms) "
          "| barrier, service CPU (ms) "
          "| kv set+get (ms) | death, closed (ms) | death, frozen (s) | idle CPU (cores) | RSS (MiB) | threads "
          "| heartbeats (frames/s) | heartbeats (KB/s) | problems |")
  lines = [head, "|" + "---|" * head.count("|")[:-1] if False else "|" + "---|" * (head.count("|") - 1)]
  for r in rows:
    lines.append(f"| {r['impl']} | {r['n']:,} | {fmt(r['registered_s'])} | {fmt(r['registration_s'])} "
                 f"| {fmt(r['barrier_release_s'], 'ms')} | {fmt(r['barrier_total_s'], 'ms')} "
                 f"| {fmt(r['barrier_service_cpu_s'], 'ms')} "
                 f"| {fmt(r['kv_set_get_s'], 'ms')} | {fmt(r['death_closed_s'], 'ms')} | {fmt(r['death_frozen_s'])} "
                 f"| {fmt(r['idle_cpu_cores'])} | {fmt(r['rss_mib'])} | {fmt(r['threads'])} "
                 f"| {fmt(r['heartbeat_frames_per_s'])} "
                 f"| {fmt(r['heartbeat_bytes_per_s'] / 1000 if r['heartbeat_bytes_per_s'] else None)} | {r['problems']} |")
  return "\n".join(lines)


PANELS = [
    ("registered_s", "all registered (s)"), ("registration_s", "all have the topology (s)"),
    ("barrier_release_s", "barrier of all, release (s)"), ("kv_set_get_s", "set + get by all (s)"),
    ("death_closed_s", "death (closed) known to all (s)"), ("idle_cpu_cores", "idle service CPU (cores)"),
    ("rss_mib", "service memory (MiB)"), ("heartbeat_frames_per_s", "heartbeat frames / s"),
]


def plot(rows: list[dict], path: str) -> None:
  """Each metric against the job's size, log-log, with a linear slope to compare."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(2, 4, figsize=(16, 7.5))
  for ax, (key, title) in zip(axes.flat, PANELS):
    for impl, style in (("ours", "o-"), ("jax", "s--")):
      pts = [(r["n"], r[key]) for r in rows if r["impl"] == impl and r[key]]
      if pts:
        ax.plot(*zip(*pts), style, label="myplugin" if impl == "ours" else "jax's service")
    ours = [(r["n"], r[key]) for r in rows if r["impl"] == "ours" and r[key]]
    if ours:
      n0, y0 = ours[0]
      ax.plot([n0, ours[-1][0]], [y0, y0 * ours[-1][0] / n0], ":", color="gray", label="linear")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("processes")
    ax.grid(True, which="both", alpha=0.3)
  axes.flat[0].legend(fontsize=8)
  axes.flat[4].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--counts", default="64,256,1024,4096,16384")
  ap.add_argument("--runs", type=int, default=3, help="runs per size; the last is the frozen death")
  ap.add_argument("--rounds", type=int, default=3, help="barrier and key-value rounds per run")
  ap.add_argument("--topology", default="real", choices=("real", "tiny"))
  ap.add_argument("--impl", default="ours", choices=("ours", "jax"))
  ap.add_argument("--per-process", type=int, default=64, help="jax: clients per load process")
  ap.add_argument("--idle-seconds", type=float, default=10)
  ap.add_argument("--frozen-timeout", type=float, default=FROZEN_HEARTBEAT_TIMEOUT_S,
                  help="the heartbeat timeout of the frozen run (100 s is the default)")
  ap.add_argument("--only-frozen", action="store_true", help="the frozen run only")
  ap.add_argument("--io-threads", default="0", help="ours: the service's event loops, comma-separated to compare "
                  "(interleaved at each size); 0 is the service's default")
  ap.add_argument("--build", default=os.path.join(ROOT, "build-bench"))
  ap.add_argument("--generator", default=None, help="a coordination_scale built before (the GPU kit's), "
                  "instead of building it in --build")
  ap.add_argument("--json", default=None, help="append each run's result to this file (JSON lines)")
  ap.add_argument("--table", default=None, help="print the table of the results in these JSON-lines files "
                  "(comma-separated), and exit")
  ap.add_argument("--plot", default=None, help="with --table: plot them to this PNG too (matplotlib)")
  args = ap.parse_args()
  if args.table:
    results = []
    for name in args.table.split(","):
      with open(name) as f:
        results += [json.loads(line) for line in f if line.strip()]
    rows = summarize([r for r in results if "error" not in r])
    print(table(rows))
    if args.plot:
      plot(rows, args.plot)
    return 0
  raise_nofile()
  counts = [int(c) for c in args.counts.split(",")]
  generator = None
  if args.impl == "ours":
    generator = args.generator or build_generator(args.build)
    if not os.access(generator, os.X_OK):
      sys.exit(f"--generator {generator} is not an executable file")
  loops_list = [int(k) for k in args.io_threads.split(",")]
  results = []
  for run in range(args.runs):
    death = "frozen" if args.only_frozen or (run == args.runs - 1 and args.runs > 1) else "closed"
    for n in counts:
      # Alternating the order run by run: neither setting always goes first.
      loops_order = loops_list if run % 2 == 0 else loops_list[::-1]
      for loops in loops_order if args.impl == "ours" else [0]:
        t0 = time.monotonic()
        try:
          if args.impl == "ours":
            r = run_ours(generator, n, death, args.rounds, args.topology, args.idle_seconds, args.frozen_timeout,
                         loops)
          else:
            r = run_jax(n, args.rounds, args.per_process, args.idle_seconds)
        except Exception as e:  # noqa: BLE001 - a size that fails is reported, the others go on
          r = {"impl": args.impl, "num_processes": n, "error": str(e)[:500]}
        r["run"], r["topology"], r["wall_s"] = run, args.topology, time.monotonic() - t0
        print(json.dumps(r), flush=True)
        results.append(r)
        if args.json:
          with open(args.json, "a") as f:
            f.write(json.dumps(r) + "\n")
  print(table(summarize(results)))
  return 0


if __name__ == "__main__":
  sys.exit(main())

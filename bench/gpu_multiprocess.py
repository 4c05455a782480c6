"""Multi-process side by side on one GPU: myplugin over XLA's CUDA engine
against jax's own CUDA backend, N processes sharing GPU 0 in both jobs.

Every rank of both jobs gets `rank_environment(rank, N)` (GPU 0 as its only
device, its own NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo, its share of the GPU's
memory: both jobs live at once, so the benchmark sets XLA_CLIENT_MEM_FRACTION
to 0.6 / 2N itself rather than take the default for one job). myplugin's job joins through MYPLUGIN_* variables, as myplugin-run
starts one; jax's runs JAX_PLATFORMS=cuda and jax.distributed.initialize(
coordinator, N, rank, local_device_ids=[0]) in each process. Both jobs are
long-lived (bench/gpu_multiprocess_worker.py: start-up and compiles are
never timed) and are driven round by round, one round of one job then one
of the other, the order swapped every round. Each round measures

  - a psum over the N processes (shard_map, one device per process), 4 KB
    to 256 MB in x4 steps: bus bandwidth as nccl-tests defines it,
    busbw = bytes / time * 2 (N - 1) / N;
  - a data-parallel training step: an MLP of 12 parameter arrays
    (bench/training_step.py's deep MLP, wider), jit with NamedSharding over
    the N processes' devices, the batch split over them, plain SGD;
  - an FSDP step (bench/training_step.py's: 4 bf16 layers D 2048, F 8192,
    4096 tokens in all, weights sharded by rows and gathered before use, the
    gradients reduce-scatters).

With --profile DIR, each process of both jobs takes a profile of three FSDP
steps before the rounds (DIR/<backend>-<N>/process-<i>), and the driver
prints, from each job's process 0, how much of the GEMM kernels' time ran
while an NCCL kernel ran on another stream (bench/gpu_overlap.py).

It prints best and median over rounds (of each round's best and median
call) per backend, the ratio myplugin/jax, and the goal lines: step time at
most 1.05 x jax's, bus bandwidth at least 0.95 x jax's from 1 MB (both on
medians). Should jax's job not start this way, its error is printed as it
came, and jax is measured as it can run: one process, the whole batch on
GPU 0 (the training step only).

--dry-run: the same on this machine's CPU (myplugin's CPU engine against
jax's CPU backend over Gloo, also started with jax.distributed.initialize),
2 processes, tiny sizes and model, 2 rounds: seconds, not a measurement.

usage: python bench/gpu_multiprocess.py [--processes 2,4] [--rounds 3] [--platforms myplugin,cuda]
                                        [--max-bytes 268435456] [--json OUT] [--fresh-jobs] [--profile DIR]
                                        [--dry-run]
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402

from jax_plugin.gpu_sharing import rank_environment  # noqa: E402  (myplugin-run --share-gpu's variables)

# What a job's processes must not inherit from the caller: they get their own.
_JOB_VARIABLES = ("JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES", "JAX_COORDINATOR_ADDRESS", "JAX_LOCAL_DEVICE_IDS",
                  "JAX_PJRT_CLIENT_CREATE_OPTIONS", "XLA_FLAGS", "XLA_CLIENT_MEM_FRACTION",
                  "XLA_PYTHON_CLIENT_MEM_FRACTION", "NCCL_HOSTID", "NCCL_SOCKET_IFNAME")
# The training step's MLP (12 parameter arrays) and global batch, and how many
# bytes each psum size moves per round: on a GPU, and in the dry run.
# The FSDP step (issue 51: its gradients are reduce-scatters, its weights
# all-gathered, each on the collective stream beside the GEMMs):
# LAYERS:D:F:TOKENS:DTYPE, TOKENS over all devices.
GPU_MODEL = {"widths": [512, 1024, 1024, 1024, 1024, 1024, 16], "batch": 4096, "step_reps": 20,
             "psum_bytes": 256 << 20, "fsdp": "4:2048:8192:4096:bfloat16"}
DRY_MODEL = {"widths": [16, 32, 32, 32, 32, 32, 1], "batch": 64, "step_reps": 5, "psum_bytes": 64 << 10,
             "fsdp": "2:64:128:64:float32"}
GOAL_STEP = 1.05  # myplugin's step time at most this times jax's
GOAL_BUSBW = 0.95  # myplugin's bus bandwidth at least this times jax's ...
GOAL_BUSBW_FROM = 1 << 20  # ... from this size
# The device memory that all processes on it at once take in all: each
# engine preallocates its share, and each process's CUDA context and NCCL's
# buffers come on top (the benchmark needs well under 2 GB a process).
MEMORY_SHARE = 0.6
WORKER_GRACE_S = 15  # the workers' deadline after the driver's
ERROR_WORDS = re.compile(r"Error|error:|ERROR|RET_CHECK|INTERNAL|INVALID_ARGUMENT|Fatal|ncclInvalid|failed")


class JobFailed(RuntimeError):
  pass


class OutOfTime(JobFailed):
  """The run's --timeout came first."""


class Job:
  """N worker processes of one backend, each in its own process group, its
  stdout read line by line, its stderr in a file (quoted when it fails)."""

  def __init__(self, backend: str, platform: str, n: int, argv: list[str], memory_fraction: float,
               deadline: float, logdir: str, profile_dir: str | None = None):
    self.backend, self.platform, self.n = backend, platform, n
    self.name = f"{backend} ({platform}, {n} process{'es' if n > 1 else ''})"
    port = free_port()
    base = {k: v for k, v in os.environ.items()
            if k not in _JOB_VARIABLES and not k.startswith("BENCH_")
            and not (k.startswith("MYPLUGIN_") and k not in ("MYPLUGIN_ENGINE", "MYPLUGIN_NCCL_PATH"))}
    base["XLA_CLIENT_MEM_FRACTION"] = f"{memory_fraction:.4g}"
    base["BENCH_BACKEND"] = backend
    if profile_dir:
      base["BENCH_PROFILE_DIR"] = profile_dir
    # The workers' own deadline comes a little after the driver's, which
    # reports it first.
    self.deadline = deadline
    base["BENCH_DEADLINE_S"] = f"{max(deadline - time.monotonic(), 1) + WORKER_GRACE_S:.0f}"
    if backend == "myplugin":
      base["JAX_PLATFORMS"] = "myplugin"
      # The engine of jax's platform; on a GPU the caller may name a CUDA engine's library.
      if platform == "cpu" or "MYPLUGIN_ENGINE" not in base:
        base["MYPLUGIN_ENGINE"] = platform
    else:
      base["JAX_PLATFORMS"] = platform
      if platform == "cpu":
        base["JAX_NUM_CPU_DEVICES"] = "1"
    self.procs, self.stderr_paths, self.idle = [], [], False
    self.lines: queue.Queue = queue.Queue()
    for rank in range(n):
      env = dict(base, **rank_environment(rank, n, 0, base))
      if backend == "myplugin":
        env.update(MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", MYPLUGIN_NUM_PROCESSES=str(n),
                   MYPLUGIN_PROCESS_ID=str(rank))
      else:
        env.update(BENCH_JAX_COORDINATOR=f"127.0.0.1:{port}", BENCH_NUM_PROCESSES=str(n),
                   BENCH_PROCESS_ID=str(rank))
      path = os.path.join(logdir, f"{backend}-{platform}-{n}-rank{rank}.log")
      try:
        with open(path, "w") as err:
          proc = subprocess.Popen([sys.executable, os.path.join(HERE, "gpu_multiprocess_worker.py"), *argv],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                  start_new_session=True)
      except OSError:
        kill_groups(self.procs)
        raise
      self.procs.append(proc)
      self.stderr_paths.append(path)
      threading.Thread(target=self._pump, args=(rank, proc), daemon=True).start()

  def _pump(self, rank, proc):
    for line in proc.stdout:
      self.lines.put((rank, line.rstrip("\n")))
    self.lines.put((rank, None))  # end of output: the process is gone

  def _collect(self, token: str, timeout: float) -> list[str]:
    """Waits until every rank printed a line starting with `token`; returns
    rank 0's lines before it. A rank that ends first, or the timeout, fails."""
    seen, lines, end = set(), [], min(time.monotonic() + timeout, self.deadline)
    while len(seen) < self.n:
      try:
        rank, line = self.lines.get(timeout=max(end - time.monotonic(), 0.01))
      except queue.Empty:
        if end == self.deadline:
          raise OutOfTime(f"{self.name}: the run's --timeout came before '{token}'") from None
        raise JobFailed(f"{self.name}: no '{token}' within {timeout:.0f} s\n{self.stderr_tails()}") from None
      if line is None:
        try:
          code = self.procs[rank].wait(timeout=10)
        except subprocess.TimeoutExpired:
          code = "?"
        raise JobFailed(f"{self.name}: rank {rank} exited with {code} before '{token}'\n{self.stderr_tails()}")
      if line.startswith(token):
        seen.add(rank)
        if rank == 0:
          self.ready_line = line
      elif rank == 0:
        lines.append(line)
    return lines

  def ready(self, timeout: float) -> str:
    self._collect("READY", timeout)
    self.idle = True
    return self.ready_line

  def round(self, timeout: float) -> dict:
    self.idle = False
    for rank, p in enumerate(self.procs):
      try:
        p.stdin.write("round\n")
        p.stdin.flush()
      except OSError:  # it is gone: say how it ended
        time.sleep(0.5)
        raise JobFailed(f"{self.name}: rank {rank} is gone before a round\n{self.stderr_tails()}") from None
    res = {"psum": {}}
    lines = self._collect("DONE", timeout)
    self.idle = True
    for line in lines:
      parts = line.split()
      if line.startswith("RESULT psum"):
        res["psum"][int(parts[2])] = (float(parts[3]), float(parts[4]))
      elif line.startswith("RESULT step"):
        res["step"] = (float(parts[2]), float(parts[3]))
      elif line.startswith("RESULT fsdp"):
        res["fsdp"] = (float(parts[2]), float(parts[3]))
    return res

  def stderr_tails(self, lines: int = 15) -> str:
    """Each rank's exit and the end of its stderr, after the first line that
    names an error (the cause, before the traceback that follows it)."""
    out = []
    for rank, path in enumerate(self.stderr_paths):
      with open(path, errors="replace") as f:
        text = [l.rstrip() for l in f.read().splitlines() if l.strip()]
      code = self.procs[rank].poll()
      first = next((l for l in text if ERROR_WORDS.search(l)), None)
      out.append(f"  rank {rank} ({'still running' if code is None else f'exit {code}'})"
                 + (f", first error line: {first.strip()}" if first else "")
                 + (":\n" + "\n".join("    " + l for l in text[-lines:]) if text else ": no stderr"))
    return "\n".join(out)

  def stop(self) -> None:
    """Ends the workers: a job between rounds is told to quit and given a
    few seconds; any other (starting, failed, late) is killed at once."""
    for p in self.procs:
      try:
        p.stdin.write("quit\n")
        p.stdin.close()
      except (BrokenPipeError, ValueError, OSError):
        pass
    end = time.monotonic() + (5 if self.idle and time.monotonic() < self.deadline else 0)
    for p in self.procs:
      try:
        p.wait(timeout=max(end - time.monotonic(), 0.1))
      except subprocess.TimeoutExpired:
        pass
    kill_groups(self.procs)


def label(b: int) -> str:
  return f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"


def summarize(rounds: list[dict]) -> dict:
  """Best of the rounds' best calls and median of their medians, per case."""
  out = {"psum": {}}
  for b in rounds[0]["psum"]:
    out["psum"][b] = (min(r["psum"][b][0] for r in rounds), statistics.median(r["psum"][b][1] for r in rounds))
  for case in ("step", "fsdp"):
    if all(case in r for r in rounds):
      out[case] = (min(r[case][0] for r in rounds), statistics.median(r[case][1] for r in rounds))
  return out


def run_processes(n: int, args, sizes: list[int], model: dict, logdir: str, deadline: float) -> dict:
  """Both jobs of N processes, round by round; returns what was measured and what failed."""
  platform = args.platforms[1]
  argv = [",".join(map(str, sizes)), ",".join(map(str, model["widths"])), str(model["batch"]),
          str(model["step_reps"]), str(model["psum_bytes"]), model["fsdp"]]
  alive = 1 if args.fresh_jobs else 2  # jobs on the device at once share its memory
  fraction = args.memory_fraction or MEMORY_SHARE / (n * alive)
  specs = {"myplugin": (n, argv), "jax": (n, argv)}
  report = {"processes": n, "platform": platform, "memory_fraction": fraction, "devices": {}, "errors": {},
            "fallback": None, "cut": None, "rounds": {"myplugin": [], "jax": []}}
  jobs: dict[str, Job] = {}

  def launch(backend):
    count, job_argv = specs[backend]
    profile = os.path.join(args.profile, f"{backend}-{count}") if args.profile else None
    jobs[backend] = Job(backend, platform, count, job_argv, fraction, deadline, logdir, profile)

  def ready_or_fall_back(backend) -> bool:
    """Waits for a launched job; myplugin's failure ends the run, jax's falls
    back once to what it can run, then leaves jax out (False)."""
    try:
      report["devices"][backend] = jobs[backend].ready(args.start_timeout)
      return True
    except JobFailed as e:
      jobs.pop(backend).stop()
      if backend == "myplugin" or isinstance(e, OutOfTime):
        raise
      if report["fallback"]:
        report["errors"]["jax (fallback)"] = str(e)
        return False
      report["errors"][backend] = str(e)
      # What jax's own backend can run instead: one process, the whole batch.
      print(f"jax's {platform} backend could not run {n} processes sharing one device:\n{e}\n"
            "falling back to jax in one process (the training step only)", flush=True)
      report["fallback"] = "1 process, the whole batch on one device (the training step only)"
      specs["jax"] = (1, ["", *argv[1:]])
      launch(backend)
      return ready_or_fall_back(backend)

  try:
    run_rounds(args, jobs, report, launch, ready_or_fall_back)
  except OutOfTime as e:
    if not report["rounds"]["myplugin"]:
      raise
    report["cut"] = str(e)  # what was measured before it is reported
  finally:
    for job in jobs.values():
      job.stop()
  return report


def run_rounds(args, jobs, report, launch, ready_or_fall_back) -> None:
  """Starts the jobs (or each job for each round, with --fresh-jobs) and runs the rounds, interleaved."""
  dropped = set()
  if not args.fresh_jobs:
    # Started together (start-up is not timed), then awaited.
    for backend in ("myplugin", "jax"):
      launch(backend)
    for backend in ("myplugin", "jax"):
      if not ready_or_fall_back(backend):
        dropped.add(backend)
  for i in range(args.rounds):
    order = ("myplugin", "jax") if i % 2 == 0 else ("jax", "myplugin")
    for backend in order:
      if backend in dropped:
        continue
      if args.fresh_jobs:
        launch(backend)
        if not ready_or_fall_back(backend):
          dropped.add(backend)
          continue
      try:
        report["rounds"][backend].append(jobs[backend].round(args.round_timeout))
      except JobFailed as e:
        jobs.pop(backend).stop()
        if backend == "myplugin" or isinstance(e, OutOfTime):
          raise
        report["errors"][backend] = str(e)
        print(f"round {i + 1}: {e}", flush=True)
        dropped.add(backend)
        continue
      if args.fresh_jobs:
        jobs.pop(backend).stop()


def print_report(report: dict, sizes: list[int], args) -> dict:
  """The tables and goal lines of one process count; returns the summary."""
  n, platform = report["processes"], report["platform"]
  mine = summarize(report["rounds"]["myplugin"])
  theirs = summarize(report["rounds"]["jax"]) if report["rounds"]["jax"] else None
  factor = 2 * (n - 1) / n
  bw = lambda b, t: b / t * factor / 1e9
  counts = {k: len(v) for k, v in report["rounds"].items()}
  rounds = (f"{counts['myplugin']} rounds" if counts["myplugin"] == counts["jax"] else
            f"rounds: myplugin {counts['myplugin']}, jax {counts['jax']},")
  print(f"\n## {n} processes{' sharing one GPU' if platform == 'cuda' else ', one CPU device each'}: myplugin "
        f"(engine {platform}) vs jax's own {platform} backend, {rounds} interleaved (order swapped every round); "
        "best / median over rounds of each round's best and median call")
  print(f"memory fraction per process {report['memory_fraction']:.4g}")
  losses = {}
  for backend, line in report["devices"].items():
    _, plat, kind, count, loss = line.split()
    losses[backend] = float(loss)
    print(f"{backend}: platform {plat}, {count} x {kind.replace('_', ' ')}; the training step's first loss {loss}")
  if report["cut"]:
    print(f"cut short by --timeout: {report['cut']} (myplugin {len(report['rounds']['myplugin'])} rounds, jax "
          f"{len(report['rounds']['jax'])})")
  if report["fallback"]:
    print(f"jax: {report['fallback']}; its error in {n} processes was:\n{report['errors']['jax']}")
  elif "jax" in report["errors"]:
    print(f"jax failed during the rounds:\n{report['errors']['jax']}")
  summary = {"processes": n, "platform": platform, "fallback": report["fallback"], "errors": report["errors"],
             "devices": report["devices"], "loss": losses, "psum": [], "step": {}}
  same_job = theirs is not None and not report["fallback"]
  print("\n| psum size | myplugin busbw GB/s | jax busbw GB/s | myplugin/jax busbw (best, median) |")
  print("|---|---|---|---|")
  ratios = []
  for b in sizes:
    mb, mm = mine["psum"][b]
    row = {"bytes": b, "myplugin": [mb, mm]}
    cell = "not run"
    ratio = "-"
    if same_job:
      jb, jm = theirs["psum"][b]
      row["jax"] = [jb, jm]
      cell = f"{bw(b, jb):.3f} / {bw(b, jm):.3f} ({jm * 1e6:.0f} us)"
      ratio = f"{jb / mb:.3f}, {jm / mm:.3f}"
      if b >= GOAL_BUSBW_FROM:
        ratios.append((jm / mm, b))
    summary["psum"].append(row)
    print(f"| {label(b)} | {bw(b, mb):.3f} / {bw(b, mm):.3f} ({mm * 1e6:.0f} us) | {cell} | {ratio} |")
  print(f"\n| training step ({len(args.model['widths']) * 2 - 2} parameter arrays, batch {args.model['batch']}) "
        "| myplugin | jax | myplugin/jax time (best, median) |")
  print("|---|---|---|---|")
  sb, sm = mine["step"]
  summary["step"]["myplugin"] = [sb, sm]
  if theirs is not None and "step" in theirs:
    jb, jm = theirs["step"]
    summary["step"]["jax"] = [jb, jm]
    print(f"| step time | {sb * 1e3:.3f} / {sm * 1e3:.3f} ms | {jb * 1e3:.3f} / {jm * 1e3:.3f} ms"
          f"{' (1 process)' if report['fallback'] else ''} | {sb / jb:.3f}, {sm / jm:.3f} |")
    step_ratio = sm / jm
    verdict = "met" if step_ratio <= GOAL_STEP else "NOT met"
    print(f"GOAL step time <= {GOAL_STEP} x jax's ({n} processes): {step_ratio:.3f} (medians) {verdict}"
          f"{' (against jax in one process: not the same job)' if report['fallback'] else ''}")
    summary["step_ratio"] = step_ratio
  else:
    print(f"| step time | {sb * 1e3:.3f} / {sm * 1e3:.3f} ms | not run | - |")
    print(f"GOAL step time <= {GOAL_STEP} x jax's ({n} processes): not measured (jax did not run)")
  if "fsdp" in mine:
    layers, d, f, tokens, dtype = args.model["fsdp"].split(":")
    print(f"\n| FSDP step ({layers} layers, D {d}, F {f}, {tokens} tokens, {dtype}) | myplugin | jax | "
          "myplugin/jax time (best, median) |")
    print("|---|---|---|---|")
    fb, fm = mine["fsdp"]
    summary["fsdp"] = {"myplugin": [fb, fm]}
    if same_job and "fsdp" in theirs:
      jb, jm = theirs["fsdp"]
      summary["fsdp"]["jax"] = [jb, jm]
      summary["fsdp_ratio"] = fm / jm
      print(f"| FSDP step time | {fb * 1e3:.3f} / {fm * 1e3:.3f} ms | {jb * 1e3:.3f} / {jm * 1e3:.3f} ms | "
            f"{fb / jb:.3f}, {fm / jm:.3f} |")
      print(f"GOAL FSDP step time <= {GOAL_STEP} x jax's ({n} processes): {fm / jm:.3f} (medians) "
            f"{'met' if fm / jm <= GOAL_STEP else 'NOT met'}")
    else:
      print(f"| FSDP step time | {fb * 1e3:.3f} / {fm * 1e3:.3f} ms | not run | - |")
  if args.profile:
    import gpu_overlap
    summary["overlap"] = {}
    for backend in ("myplugin", "jax"):
      found = gpu_overlap.from_profile(os.path.join(args.profile, f"{backend}-{n}", "process-0"))
      summary["overlap"][backend] = found
      print(f"{backend}'s FSDP profile (process 0): {gpu_overlap.describe(found)}")
  if ratios:
    worst, at = min(ratios)
    verdict = "met" if worst >= GOAL_BUSBW else "NOT met"
    print(f"GOAL busbw >= {GOAL_BUSBW} x jax's from {label(GOAL_BUSBW_FROM)} ({n} processes): worst {worst:.3f} "
          f"at {label(at)} (medians) {verdict}")
    summary["busbw_worst_ratio"] = [worst, at]
  else:
    why = "jax's psum did not run" if not same_job else f"no size from {label(GOAL_BUSBW_FROM)} in this run"
    print(f"GOAL busbw >= {GOAL_BUSBW} x jax's from {label(GOAL_BUSBW_FROM)} ({n} processes): not measured ({why})")
  return summary


def parse(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--processes", help="comma-separated process counts, each >= 2 (default 2,4)")
  parser.add_argument("--rounds", type=int, help="default 3")
  parser.add_argument("--platforms", help="myplugin,cuda (a GPU; the default) or myplugin,cpu (myplugin's CPU "
                      "engine against jax's CPU backend)")
  parser.add_argument("--min-bytes", type=int, default=4 << 10)
  parser.add_argument("--max-bytes", type=int, help="default 256 MB")
  parser.add_argument("--memory-fraction", type=float,
                      help=f"XLA_CLIENT_MEM_FRACTION of every process (default {MEMORY_SHARE} / processes on the device at once)")
  parser.add_argument("--fresh-jobs", action="store_true",
                      help="start each job anew for each of its rounds, one job on the device at a time")
  parser.add_argument("--timeout", type=float, default=540, help="the whole run's hard deadline, seconds")
  parser.add_argument("--start-timeout", type=float, default=240, help="seconds for a job to start and compile")
  parser.add_argument("--round-timeout", type=float, default=180, help="seconds for one round of one job")
  parser.add_argument("--json", help="also write the summaries here")
  parser.add_argument("--profile", help="profile three FSDP steps of every process into this folder, and say "
                      "whether NCCL's kernels ran beside the GEMMs")
  parser.add_argument("--dry-run", action="store_true",
                      help="on this CPU: the defaults become --platforms myplugin,cpu --processes 2 --rounds 2 "
                      "--max-bytes 1048576")
  args = parser.parse_args(argv)
  defaults = (("myplugin,cpu", "2", 2, 1 << 20) if args.dry_run else ("myplugin,cuda", "2,4", 3, 256 << 20))
  for name, value in zip(("platforms", "processes", "rounds", "max_bytes"), defaults):
    if getattr(args, name) is None:
      setattr(args, name, value)
  try:
    args.processes = [int(p) for p in args.processes.split(",") if p]
  except ValueError:
    parser.error(f"--processes {args.processes!r}: expected comma-separated integers")
  if not args.processes or min(args.processes) < 2:
    parser.error("--processes: each count must be at least 2 (a psum over processes needs two)")
  args.platforms = [p for p in args.platforms.split(",") if p]
  if len(args.platforms) != 2 or args.platforms[0] != "myplugin" or args.platforms[1] not in ("cuda", "cpu"):
    parser.error(f"--platforms {','.join(args.platforms)!r}: expected myplugin,cuda or myplugin,cpu")
  if args.rounds < 1:
    parser.error("--rounds must be at least 1")
  if not 0 < args.min_bytes <= args.max_bytes:
    parser.error("--min-bytes and --max-bytes: need 0 < min <= max")
  if args.memory_fraction is not None and not 0 < args.memory_fraction <= 1:
    parser.error("--memory-fraction must be in (0, 1]")
  args.model = DRY_MODEL if args.platforms[1] == "cpu" else GPU_MODEL
  return args


def main(argv=None) -> int:
  args = parse(argv)
  deadline = time.monotonic() + args.timeout
  sizes, s = [], args.min_bytes
  while s <= args.max_bytes:
    sizes.append(s)
    s *= 4
  summaries, failed = [], False
  with tempfile.TemporaryDirectory(prefix="bench-gpu-mp-") as logdir:
    for n in args.processes:
      try:
        if time.monotonic() >= deadline:
          raise OutOfTime(f"not started: the run's --timeout ({args.timeout:.0f} s) was reached")
        report = run_processes(n, args, sizes, args.model, logdir, deadline)
        summaries.append(print_report(report, sizes, args))
      except OutOfTime as e:
        print(f"\n## {n} processes: no round of myplugin before the run's --timeout\n{e}", flush=True)
        summaries.append({"processes": n, "errors": {"run": str(e)}})
        failed = True
      except JobFailed as e:
        print(f"\n## {n} processes: myplugin's job failed, no comparison\n{e}", flush=True)
        summaries.append({"processes": n, "errors": {"myplugin": str(e)}})
        failed = True
      sys.stdout.flush()
      if args.json:  # after each process count, so that a run cut short keeps what it measured
        with open(args.json, "w") as f:
          json.dump({"platforms": args.platforms, "rounds": args.rounds,
                     "runs": summaries}, f, indent=1)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())

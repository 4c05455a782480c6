"""Time from a preemption notice to the agreed step saved by orbax.

Each job is tests/programs/preemption_orbax.py (orbax's CheckpointManager,
unchanged, asking the sync point at every step) under myplugin-run, with a
state of --size float32. Once every rank runs, this script sends SIGTERM
and takes the time (time.time()); the time measured is until the last
rank has written the agreed step (its `SAVED` line, time.time() in the
rank, after manager.wait_until_finished()).

  rank      SIGTERM to the last rank's process (one node's scheduler)
  launcher  SIGTERM to myplugin-run, which forwards it to every rank

Baseline, from the same job: its save of step 2 (the same state, no
notice; after orbax's initial save of step 1, which pays first-use costs),
from the first rank's `SAVING` to the last rank's `SAVED`. ratio = notice to saved / one save. Rounds run the
modes and process counts interleaved; best and median of the rounds.

  python bench/preemption.py [--rounds 5] [--processes 2,4] [--size 16000000]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import kill_groups  # noqa: E402

PROGRAM = os.path.join(HERE, "..", "tests", "programs", "preemption_orbax.py")
JOB_TIMEOUT_S = 120


def job(n: int, mode: str, size: int, directory: str) -> tuple[float, float]:
  """(notice to saved, one save) in seconds, for one job."""
  argv = [sys.executable, "-m", "jax_plugin.launcher", "-n", str(n), "--timeout", str(JOB_TIMEOUT_S), "--",
          sys.executable, PROGRAM, directory, "none", "1000000", "--size", str(size),
          "--save-on", "2"]
  env = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_")}
  p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       start_new_session=True)
  lines = []
  reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
  reader.start()
  try:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    pids = {}
    while len(pids) < n and p.poll() is None and time.monotonic() < deadline:
      pids = {int(r): int(pid) for r, pid in re.findall(r"^\[(\d+)\] RUNNING (\d+)$", "".join(lines), re.M)}
      time.sleep(0.01)
    if len(pids) < n:
      raise SystemExit(f"{n} processes, {mode}: not every rank ran:\n{''.join(lines)[-4000:]}")
    sent = time.time()
    os.kill(pids[n - 1] if mode == "rank" else p.pid, signal.SIGTERM)
    p.wait(timeout=JOB_TIMEOUT_S + 30)
  finally:
    kill_groups([p])
    p.wait(timeout=30)
  reader.join(timeout=10)
  out = "".join(lines)
  want = 0 if mode == "rank" else 128 + signal.SIGTERM
  events = [(w, int(s), float(t)) for w, s, t in re.findall(r"^\[\d+\] (SAVING|SAVED) (\d+) (\S+)$", out, re.M)]
  agreed = {int(s) for s in re.findall(r'"preempted_at": (\d+)', out)}
  if p.returncode != want or len(agreed) != 1 or sum(w == "SAVED" and s in agreed for w, s, _ in events) != n:
    raise SystemExit(f"{n} processes, {mode}: exit {p.returncode} (want {want}), agreed on {agreed}:\n{out[-4000:]}")
  one_save = (max(t for w, s, t in events if w == "SAVED" and s == 2) -
              min(t for w, s, t in events if w == "SAVING" and s == 2))
  return max(t for w, s, t in events if w == "SAVED" and s in agreed) - sent, one_save


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--processes", default="2,4")
  parser.add_argument("--size", type=int, default=16_000_000, help="float32 in the saved state (default: 64 MB)")
  args = parser.parse_args()
  counts = [int(c) for c in args.processes.split(",")]
  modes = ("rank", "launcher")
  took = {(n, m): [] for n in counts for m in modes}
  for r in range(args.rounds):
    for n in counts:
      for mode in modes:
        with tempfile.TemporaryDirectory(prefix="myplugin-bench-preemption-") as d:
          notice, save = job(n, mode, args.size, os.path.join(d, "ckpt"))
        took[(n, mode)].append((notice, save))
        print(f"round {r}: {n} processes, SIGTERM to the {mode}: saved {notice:.2f} s after it; "
              f"one save {save:.2f} s", flush=True)
  print(f"\nfrom SIGTERM to the agreed step saved by orbax ({args.size * 4 / 1e6:.0f} MB state, {os.cpu_count()} CPUs, "
        f"{args.rounds} rounds; one save: the same job's save of step 2, no notice):")
  print("| processes | SIGTERM to | notice to saved, best / median | one save, best / median | ratio, best / median |")
  print("|---|---|---|---|---|")
  for (n, mode), v in took.items():
    notice = [a for a, _ in v]
    save = [b for _, b in v]
    ratio = [a / b for a, b in v]
    print(f"| {n} | {mode} | {min(notice):.2f} / {statistics.median(notice):.2f} s | {min(save):.2f} / "
          f"{statistics.median(save):.2f} s | {min(ratio):.2f} / {statistics.median(ratio):.2f} |")


if __name__ == "__main__":
  main()

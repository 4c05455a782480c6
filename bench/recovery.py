"""Time lost per failure: in-place recovery vs the launcher's restarts vs a
full job restart by hand, on examples/elastic_training.py.

Each run is one job under myplugin-run; the time lost is the job's wall
time minus that of the same job with no failure (measured in the same
round). The modes run interleaved, round after round; best and median of
the rounds are reported.

  python bench/recovery.py [--rounds 3] [-n 3] [--steps 200] [--every 20] [--kill-step 50] [--hidden 32768]

  in place   --recover 1: the survivors agree, rebuild, restore the
             checkpoint they keep; the killed rank is started again and
             rejoins at the first checkpoint after it registered.
  survivors  --recover 0: in place, the job ends without the killed rank
             (no second rebuild, no process start beside the training).
  restarts   --max-restarts 1: every rank ends, the job starts again and
             resumes from the checkpoint on disk.
  by hand    the job fails (exit 100 + rank), then a new myplugin-run is
             started by hand and resumes from the checkpoint on disk.

--compilation-cache job (the default): every job, in every mode, starts
with an empty jax persistent compilation cache of its own (the two jobs of
"by hand" share one, as a user's setting would): a membership seen before
(the job's own, after a restart or a rejoin) loads its program instead of
compiling it. shared: one cache for the whole run, warmed by a first round
that is not counted (the steady state of a user who keeps a cache: the
survivors' smaller membership is loaded too). off: no cache.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "elastic_training.py")
JOB_TIMEOUT_S = 400


CACHE = "job"  # --compilation-cache
SHARED_CACHE = None  # the one folder of --compilation-cache shared


def run_job(launcher_args, example_args, cache_dir=None) -> float:
  """Wall seconds of one myplugin-run job; raises if it fails or outlives its deadline."""
  cache_dir = SHARED_CACHE or cache_dir
  own_cache = CACHE == "job" and cache_dir is None
  if own_cache:
    cache_dir = tempfile.mkdtemp(prefix="myplugin-bench-cache-")
  cache = ["--compilation-cache", cache_dir] if CACHE != "off" else []
  argv = [sys.executable, "-m", "jax_plugin.launcher", *launcher_args, "--timeout", str(JOB_TIMEOUT_S), "--",
          sys.executable, EXAMPLE, *example_args, *cache]
  env = {k: v for k, v in os.environ.items() if not k.startswith("MYPLUGIN_")}
  t0 = time.monotonic()
  p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       start_new_session=True)
  try:
    out, _ = p.communicate(timeout=JOB_TIMEOUT_S + 30)
  finally:
    try:
      os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  elapsed = time.monotonic() - t0
  if own_cache:
    shutil.rmtree(cache_dir, ignore_errors=True)
  return elapsed, p.returncode, out


def must(result, what):
  elapsed, code, out = result
  if code != 0 or "final loss" not in out:
    raise SystemExit(f"{what} failed (exit {code}):\n{out[-4000:]}")
  return elapsed


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("-n", type=int, default=3)
  # The schedule (200 steps, a checkpoint every 20, a kill at step
  # 50), with a step of about 15 ms: long enough for the restarted rank to
  # be back while the job runs (the example's default width steps in 1 ms).
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--every", type=int, default=20)
  parser.add_argument("--kill-step", type=int, default=50)
  parser.add_argument("--hidden", type=int, default=32768, help="the model's width (the example's --hidden)")
  parser.add_argument("--compilation-cache", choices=("job", "shared", "off"), default="job")
  parser.add_argument("--cpu-bind", action="store_true",
                      help="every job under myplugin-run --cpu-bind: each rank on its own share of the CPUs")
  args = parser.parse_args()
  global CACHE, SHARED_CACHE
  CACHE = args.compilation_cache
  if CACHE == "shared":
    SHARED_CACHE = tempfile.mkdtemp(prefix="myplugin-bench-cache-")
  common = ["--steps", str(args.steps), "--checkpoint-every", str(args.every), "--kill-rank", str(args.n - 1),
            "--hidden", str(args.hidden)]
  n = ["-n", str(args.n)] + (["--cpu-bind"] if args.cpu_bind else [])
  lost = {"in place": [], "survivors": [], "restarts": [], "by hand": []}
  for r in range(-1 if CACHE == "shared" else 0, args.rounds):
    base = must(run_job(n + ["--recover", "0"], common + ["--kill-step", "-1"]), "the run with no failure")
    inplace_run = run_job(n + ["--recover", "1"], common + ["--kill-step", str(args.kill_step)])
    inplace = must(inplace_run, "in place")
    # Whether the restarted rank got back in before the job finished, and at which step.
    rejoined = re.findall(rf"\[{args.n - 1}\] epoch \d+: members .*resuming at step (\d+)", inplace_run[2])
    # The killed rank stays out: the launcher's exit code says so (1), the survivors finished.
    survivors_run = run_job(n + ["--recover", "0"], common + ["--kill-step", str(args.kill_step)])
    if "final loss" not in survivors_run[2]:
      raise SystemExit("survivors failed:\n" + survivors_run[2][-4000:])
    survivors = survivors_run[0]
    back = [float(v) for v in re.findall(r"training again ([0-9.]+) s after the error", survivors_run[2])]
    d = tempfile.mkdtemp(prefix="myplugin-bench-recovery-")
    try:
      restarts = must(run_job(n + ["--max-restarts", "1"],
                              common + ["--kill-step", str(args.kill_step), "--mode", "restart", "--dir", d]),
                      "restarts")
    finally:
      shutil.rmtree(d, ignore_errors=True)
    d = tempfile.mkdtemp(prefix="myplugin-bench-recovery-")
    cache = os.path.join(d, "cache") if CACHE == "job" else None
    try:
      first = run_job(n, common + ["--kill-step", str(args.kill_step), "--mode", "restart", "--dir", d], cache)
      if first[1] == 0:
        raise SystemExit("the job that should fail did not:\n" + first[2][-4000:])
      # The second job is not killed: MYPLUGIN_RESTART_COUNT is set only by --max-restarts.
      second = must(run_job(n, common + ["--kill-step", "-1", "--mode", "restart", "--dir", d], cache), "by hand")
      by_hand = first[0] + second
    finally:
      shutil.rmtree(d, ignore_errors=True)
    if r < 0:
      print("warm-up round done (not counted)", flush=True)
      continue
    for k, v in (("in place", inplace), ("survivors", survivors), ("restarts", restarts), ("by hand", by_hand)):
      lost[k].append(v - base)
    print(f"round {r}: no failure {base:.2f} s; lost: in place {inplace - base:.2f} s "
          f"(rank back at step {rejoined[0] if rejoined else 'never: the job finished first'}), survivors "
          f"{survivors - base:.2f} s (error to training again: {max(back, default=float('nan')):.2f} s), "
          f"restarts {restarts - base:.2f} s, by hand {by_hand - base:.2f} s", flush=True)
  print(f"\ntime lost per failure ({args.n} processes{' bound to CPUs' if args.cpu_bind else ''}, "
        f"{os.cpu_count()} CPUs, {args.steps} steps, checkpoint every {args.every}, "
        f"rank {args.n - 1} killed at step {args.kill_step}; {args.rounds} rounds; compilation cache "
        f"{CACHE}):")
  for k, v in lost.items():
    print(f"  {k:9s} best {min(v):7.2f} s   median {statistics.median(v):7.2f} s")
  for k in ("in place", "survivors"):
    ratio = [a / b for a, b in zip(lost[k], lost["by hand"]) if b > 0]
    if ratio:
      print(f"  {k} / by hand: best {min(ratio):.2f}, median {statistics.median(ratio):.2f} (goal: < 0.33)")


if __name__ == "__main__":
  try:
    main()
  finally:
    if SHARED_CACHE:
      shutil.rmtree(SHARED_CACHE, ignore_errors=True)

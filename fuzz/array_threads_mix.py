"""A bounded random search for crashes on the paths where several threads
touch one array: jobs of tests/programs/array_threads_worker.py's `mix`
(sends both ways, exports, reads on a second thread, deletes, donations,
views of numpy memory), each with a fresh seed, 2 or 3 processes, and in
some a process killed at a random moment. Every job must end within its
deadline: each process with RESULT "done" and every array right, or, where
a process was killed, every other one with RESULT "error" naming it (or
"done", when it had finished first) and exit code 0. A failure prints its
seed and output (rerun one job: --seed S) and exits 1; a crash found
becomes a test in tests/test_array_threads.py.

usage: python fuzz/array_threads_mix.py [--seconds 60] [--seed S]
"""
import argparse
import os
import random
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from job import Job  # noqa: E402


def one_job(seed: int) -> str | None:
  """None when the job ended as it must; otherwise what went wrong."""
  rng = random.Random(seed)
  processes = rng.choice([2, 2, 3])
  kill = rng.random() < 0.4
  env = {"MYPLUGIN_NUM_DEVICES": "1", "MIX_SEED": str(seed), "ROUNDS": "100000" if kill else str(rng.randint(20, 120)),
         "SECONDS": "60", "TEST_HEARTBEAT_TIMEOUT": "30"}
  victim = rng.randrange(1, processes) if kill else None
  with Job(processes, ["mix"], program="array_threads_worker.py", env=env) as job:
    if kill:
      try:
        job.wait_event("looping", timeout=120)
      except AssertionError as e:
        return f"no round came: {e}"
      time.sleep(rng.uniform(0.0, 1.5))
      job.signal(victim, signal.SIGKILL)
    survivors = [r for r in range(processes) if r != victim]
    try:
      codes = job.wait(survivors, timeout=180)
    except AssertionError as e:
      return f"a process did not end: {e}"
    for r in survivors:
      if codes[r] != 0:
        return f"process {r} exited {codes[r]}\n{job.all_output()}"
      done, error = job.event(r, "done"), job.event(r, "error")
      if done and not done["ok"]:
        return f"process {r}: wrong data {done['wrong']}\n{job.all_output()}"
      if not kill and not done:
        return f"process {r} ended without its result\n{job.all_output()}"
      if kill and not done and not (error and f"process {victim}" in error["error"]):
        return f"process {r} did not name the killed process {victim}: {error}\n{job.all_output()}"
  return None


def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--seconds", type=float, default=60)
  ap.add_argument("--seed", type=int, default=None, help="run this one job only")
  args = ap.parse_args()
  if args.seed is not None:
    seeds = [args.seed]
  else:
    first = random.SystemRandom().randrange(1 << 30)
    seeds = (first + i for i in range(1 << 30))
  deadline = time.monotonic() + args.seconds
  jobs = 0
  for seed in seeds:
    if args.seed is None and time.monotonic() > deadline:
      break
    problem = one_job(seed)
    jobs += 1
    if problem:
      print(f"array_threads_mix: seed {seed} failed (rerun: python fuzz/array_threads_mix.py --seed {seed}):\n"
            f"{problem}", flush=True)
      return 1
  print(f"array_threads_mix: {jobs} jobs clean", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

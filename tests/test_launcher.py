"""myplugin-run: starts a job, prefixes output by rank, and ends the whole
job on the first failure with an exit code that names the rank."""
import concurrent.futures
import os
import re
import shutil
import sys
import time

import pytest

from proc import child_env, kill_group, run, run_python

LAUNCHER = ["-m", "jax_plugin.launcher"]

PROGRAM = """
import jax
print("process", jax.process_index(), "of", jax.process_count(), "devices", jax.device_count(),
      "local", jax.local_device_count(), "platform", jax.devices()[0].platform)
"""


def test_runs_four_processes_with_rank_prefixes():
  r = run_python(LAUNCHER + ["-n", "4", "--devices-per-process", "2", "--", sys.executable, "-c", PROGRAM],
                 child_env(), timeout=180)
  assert r.returncode == 0, r.output
  for rank in range(4):
    assert f"[{rank}] process {rank} of 4 devices 8 local 2 platform myplugin" in r.stdout, r.output


@pytest.mark.skipif(shutil.which("myplugin-run") is None, reason="console script not on PATH")
def test_console_script():
  p = run(["myplugin-run", "-n", "2", "--", sys.executable, "-c", PROGRAM], child_env(), timeout=180)
  assert p.returncode == 0, p.output
  assert "[1] process 1 of 2" in p.stdout


def test_a_rank_that_raises_and_exits_slowly_is_reported_with_its_own_exit_code():
  """A rank that raises mid-loop and is slow to exit afterwards (an exit
  handler of its own that takes 3 s, as a busy machine made jax's teardown
  take 1.5 s: load 5 on 2 cores); the others end first (fate-sharing). The
  summary says what the rank did (exit code 1), not the launcher's kill:
  before, the launcher killed it 0.5 s after the others ended and said
  "killed by SIGKILL" (7 runs in 8 at that load)."""
  program = """
import atexit, time
atexit.register(time.sleep, 3)  # registered first: runs last, after myplugin reported the failure
import jax
jax.devices()
for step in range(1000):
  time.sleep(0.01)
  if jax.process_index() == 1 and step == 50:
    raise ValueError("bad step")
"""
  r = run_python(LAUNCHER + ["-n", "3", "--", sys.executable, "-c", program], child_env(), timeout=180)
  assert r.returncode == 101, r.output
  assert "myplugin-run: rank 1 failed first with exit code 1" in r.stderr, r.output
  assert "ValueError: bad step" in r.stderr, r.output


def test_a_rank_stuck_after_the_job_finished_is_ended_and_named():
  """Every rank passes the job's shutdown barrier (its program finished,
  its result printed); then rank 1 hangs in its teardown (as a rank hung
  in the client's destructor for the collective timeout, 5 minutes, and
  the launcher then returned 0 with no word). The launcher ends it
  --teardown-grace seconds after the barrier and says so; the work was
  complete, so the exit code is 0."""
  program = """
import os, time
import jax
jax.devices()
jax.distributed.shutdown()
print("RESULT", jax.process_index(), flush=True)
if jax.process_index() == 1:
  time.sleep(600)  # stuck in teardown
"""
  start = time.monotonic()
  r = run_python(LAUNCHER + ["-n", "2", "--teardown-grace", "2", "--", sys.executable, "-c", program], child_env(),
                 timeout=180)
  assert r.returncode == 0, r.output
  assert "[0] RESULT 0" in r.stdout and "[1] RESULT 1" in r.stdout, r.output
  assert ("myplugin-run: ranks [1] still running 2 s after every rank passed the job's shutdown barrier (their "
          "programs finished): stuck in teardown; ending them (exit code stays 0)") in r.stderr, r.output
  assert time.monotonic() - start < 120, r.output
  # A negative bound is a usage error.
  bad = run_python(LAUNCHER + ["-n", "2", "--teardown-grace", "-1", "--", sys.executable, "-c", "0"], child_env(),
                   timeout=60)
  assert bad.returncode == 2 and "--teardown-grace must be at least 0" in bad.stderr, bad.output


def test_a_mismatch_is_said_in_full_once_in_each_ranks_output_and_referred_to_elsewhere():
  """Two processes gather arrays of different sizes: each raises the
  mismatch (its 300-character sentence in its traceback), and a rank told of
  the other's failure before it reported its own says it in its notice. The
  coordinator's log and myplugin-run's summary, which share the job's
  stream, say its start and refer to the rest (it appeared five times)."""
  program = """
import jax, numpy as np
from jax.experimental import multihost_utils as mu
n = 4 if jax.process_index() == 0 else 8
print(mu.process_allgather(np.arange(n)))
"""
  r = run_python(LAUNCHER + ["-n", "2", "--", sys.executable, "-c", program], child_env(), timeout=180)
  assert r.returncode in (100, 101), r.output
  sentence = ("the processes issued different collectives: process 0 issued all-gather s32[4] (call #0); "
              "process 1 issued all-gather s32[8] (call #0)")
  tracebacks = [l for l in r.stderr.splitlines() if "] jax.errors.JaxRuntimeError: FAILED_PRECONDITION" in l]
  notices = [l for l in r.stderr.splitlines() if "(seen by process" in l]
  assert len(tracebacks) == 2 and r.output.count(sentence) == len(tracebacks) + len(notices) <= 3, r.output
  summary = next(l for l in r.stderr.splitlines() if l.startswith("myplugin-run: rank"))
  assert "exited with an uncaught exception: JaxRuntimeError: FAILED_PRECONDITION: myplugin: collective mismatch" in \
      summary and summary.count("… (in full above)") == 1, summary
  logged = next(l for l in r.stderr.splitlines() if l.startswith("myplugin coordinator: process"))
  assert logged.endswith("… (in full in the processes' output)"), logged


def test_failing_rank_ends_the_job_and_is_named():
  program = """
import time, jax
jax.devices()
if jax.process_index() == 2:
  raise ValueError("bad shard")
time.sleep(120)
"""
  t0 = time.monotonic()
  r = run_python(LAUNCHER + ["-n", "4", "--", sys.executable, "-c", program], child_env(), timeout=180)
  elapsed = time.monotonic() - t0
  assert r.returncode == 102, r.output  # 100 + the rank that failed first
  assert "myplugin-run: rank 2 failed first with exit code 1" in r.stderr, r.output
  assert "ValueError: bad shard" in r.stderr
  # The others learned who failed (fate-sharing), well before their 120 s sleep ends.
  for rank in (0, 1, 3):
    assert f"[{rank}] myplugin: process 2 failed: exited with an uncaught exception: ValueError: bad shard" in r.stderr
  assert elapsed < 100, elapsed


def test_job_timeout():
  r = run_python(LAUNCHER + ["-n", "2", "--timeout", "5", "--", sys.executable, "-c", "import time; time.sleep(300)"],
                 child_env(), timeout=120)
  assert r.returncode == 124, r.output
  assert "did not finish within 5 s" in r.stderr


def test_usage_errors():
  r = run_python(LAUNCHER + ["-n", "2"], child_env(), timeout=60)
  assert r.returncode == 2 and "no command given" in r.stderr
  r = run_python(LAUNCHER + ["-n", "0", "--", "true"], child_env(), timeout=60)
  assert r.returncode == 2 and "-n must be at least 1" in r.stderr


CULPRIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "culprit_worker.py")
# Trials of the culprit test that run at once (2 cores, another test file beside).
CULPRIT_TRIALS_AT_ONCE = 4


@pytest.mark.parametrize("mode", ["raise", "kill", "stop"])
def test_exit_code_names_the_culprit_every_time(mode):
  # Rank 1 raises, is SIGKILLed, or is SIGSTOPped (then found by a 2 s
  # heartbeat timeout: short, yet far above a loaded machine's stalls of the
  # healthy rank) while rank 0 waits for it in an all-reduce. Rank 0 is
  # ended by fate-sharing, and used to win the race to be blamed.
  # The 20 trials are separate jobs; a few run at once, since each spends
  # most of its time idle (the heartbeat timeout, or the failing rank's
  # grace for news of an earlier failure), and each is judged on its own.
  def trial(number):
    return number, run_python(LAUNCHER + ["-n", "2", "--heartbeat-timeout", "2", "--timeout", "60", "--",
                                          sys.executable, CULPRIT, mode], child_env(), timeout=90)

  with concurrent.futures.ThreadPoolExecutor(CULPRIT_TRIALS_AT_ONCE) as pool:
    trials = list(pool.map(trial, range(20)))
  for trial, r in trials:
    assert r.returncode == 101, f"trial {trial}: exit {r.returncode}\n{r.output}"
    assert "myplugin-run: rank 1 failed first" in r.stderr, r.output
    # The bystander's own status says another rank ended it.
    assert "ranks [0] were ended because of it (exit code 42)" in r.stderr, r.output
    # Rank 0 names the cause, whether fate-sharing ended it or its all-reduce
    # raised first (the abort says why).
    assert re.search(r"^\[0\] .*process 1 failed: ", r.stderr, re.M), r.output
    assert "all-reduce returned" not in r.stdout


RESTARTED = """
import os, sys
attempt = int(os.environ["MYPLUGIN_RESTART_COUNT"])
n, me = int(os.environ["MYPLUGIN_NUM_PROCESSES"]), int(os.environ["MYPLUGIN_PROCESS_ID"])
if n == 3 and me == 2 and "--broken-host" in sys.argv:
  sys.exit(5)  # before it joins: its host is gone
if attempt == 1 and me == 2 and "--fail-late-then-early" in sys.argv:
  sys.exit(5)  # before it joins, but it had joined the attempt before
import jax, numpy as np
x = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(np.ones(jax.local_device_count(), np.float32))
if attempt == 0 and me == 1 and "--fail-first" in sys.argv:
  os._exit(3)
if attempt == 0 and me == 2 and "--fail-late-then-early" in sys.argv:
  os._exit(3)  # after it joined
print("attempt", attempt, "of", jax.process_count(), "psum", float(x[0]), flush=True)
"""


def test_max_restarts_starts_the_job_again_and_it_completes():
  r = run_python(LAUNCHER + ["-n", "3", "--max-restarts", "2", "--", sys.executable, "-c", RESTARTED, "--fail-first"],
                 child_env(), timeout=240)
  assert r.returncode == 0, r.output
  assert "myplugin-run: rank 1 failed first with exit code 3" in r.stderr, r.output
  assert "myplugin-run: restarting the job (restart 1 of 2)" in r.stderr, r.output
  for rank in range(3):
    assert f"[{rank}] attempt 1 of 3 psum 3.0" in r.stdout, r.output
  assert "attempt 0 of" not in r.stdout.replace("[0] attempt 0 of 3", "").replace("[2] attempt 0 of 3", ""), r.output
  assert "restart 2 of 2" not in r.stderr


def test_restarts_run_out_and_the_culprit_is_named():
  program = "import os, sys; sys.exit(7 if os.environ['MYPLUGIN_PROCESS_ID'] == '1' else 0)"
  r = run_python(LAUNCHER + ["-n", "2", "--max-restarts", "1", "--", sys.executable, "-c", program],
                 child_env(), timeout=120)
  assert r.returncode == 101, r.output
  assert r.stderr.count("myplugin-run: rank 1 failed first with exit code 7") == 2, r.output
  assert "restarting the job (restart 1 of 1)" in r.stderr


def test_a_rank_that_keeps_failing_before_it_joins_is_left_out():
  r = run_python(LAUNCHER + ["-n", "3", "--max-restarts", "3", "--min-processes", "2", "--", sys.executable, "-c",
                             RESTARTED, "--broken-host"], child_env(), timeout=240)
  assert r.returncode == 0, r.output
  assert "rank 2 failed twice in a row before it joined; 2 processes now" in r.stderr, r.output
  for rank in range(2):
    assert f"[{rank}] attempt 2 of 2 psum 2.0" in r.stdout, r.output


def test_a_rank_that_had_joined_before_is_not_left_out():
  # Rank 2 fails after joining in attempt 0 and before joining in attempt 1:
  # not twice in a row before joining, so attempt 2 still runs 3 processes.
  r = run_python(LAUNCHER + ["-n", "3", "--max-restarts", "2", "--min-processes", "2", "--", sys.executable, "-c",
                             RESTARTED, "--fail-late-then-early"], child_env(), timeout=240)
  assert r.returncode == 0, r.output
  assert r.stderr.count("myplugin-run: rank 2 failed first") == 2, r.output
  assert "processes now" not in r.stderr, r.output
  for rank in range(3):
    assert f"[{rank}] attempt 2 of 3 psum 3.0" in r.stdout, r.output


def test_restart_usage_errors():
  r = run_python(LAUNCHER + ["-n", "2", "--min-processes", "3", "--", "true"], child_env(), timeout=60)
  assert r.returncode == 2 and "--min-processes must be between 1 and -n" in r.stderr
  r = run_python(LAUNCHER + ["-n", "2", "--max-restarts", "-1", "--", "true"], child_env(), timeout=60)
  assert r.returncode == 2 and "--max-restarts must be at least 0" in r.stderr


def test_cpu_shares_split_the_cpus():
  from jax_plugin.cpu_binding import cpu_shares
  assert cpu_shares(2, [0, 1]) == [[0], [1]]
  assert cpu_shares(1, [3, 1, 2]) == [[1, 2, 3]]
  assert cpu_shares(2, [0, 1, 2, 3, 4, 5]) == [[0, 1, 2], [3, 4, 5]]
  assert cpu_shares(4, list(range(10))) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
  # More ranks than CPUs: one each, in turn.
  assert cpu_shares(3, [0, 1]) == [[0], [1], [0]]
  assert cpu_shares(3, [5]) == [[5], [5], [5]]
  with pytest.raises(ValueError, match="cannot share 0 CPUs among 2 processes"):
    cpu_shares(2, [])


def test_a_binding_that_cannot_be_set_is_said_and_leaves_the_process_as_it_was():
  import subprocess
  from jax_plugin.cpu_binding import bind
  # Its own deadline (30 s), and its group killed on the way out.
  p = subprocess.Popen(["sleep", "30"], start_new_session=True)
  try:
    before = os.sched_getaffinity(p.pid)
    why = bind(p.pid, [4095])  # no such CPU here
    assert why is not None and why.startswith(f"cannot bind process {p.pid} to CPUs [4095]: "), why
    assert os.sched_getaffinity(p.pid) == before
    assert bind(p.pid, [min(before)]) is None and os.sched_getaffinity(p.pid) == {min(before)}
  finally:
    kill_group(p)
    p.wait(timeout=30)
  assert bind(p.pid, [min(before)]) is None  # gone: left be


# Every thread of the process (the engine's pools included, once it has run
# a program) and the CPUs each may run on.
THREAD_CPUS = """
import os, jax, jax.numpy as jnp
float(jnp.sum(jnp.ones((256, 256)) @ jnp.ones((256, 256))))
allowed = set()
for tid in os.listdir("/proc/self/task"):
  with open(f"/proc/self/task/{tid}/status") as f:
    line = next(l for l in f if l.startswith("Cpus_allowed_list:"))
  for part in line.split(":")[1].strip().split(","):
    lo, _, hi = part.partition("-")
    allowed.update(range(int(lo), int(hi or lo) + 1))
print("threads", len(os.listdir("/proc/self/task")), "cpus", sorted(allowed), flush=True)
"""

# Rank 1's first process dies; the one started in its place says its CPUs
# (rank 0 stays until then, at most 50 s: a rank that dies when the others
# have finished is not started again). argv[1]: the file by which the
# restarted rank says it has started.
RESTARTED_CPUS = """
import os, sys, time
if os.environ.get("MYPLUGIN_PROCESS_ID") == "0":
  deadline = time.monotonic() + 50
  while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
if os.environ.get("MYPLUGIN_PROCESS_ID") == "1" and not os.environ.get("MYPLUGIN_REJOIN"):
  os.kill(os.getpid(), 9)
print("restarted" if os.environ.get("MYPLUGIN_REJOIN") else "first", "cpus", sorted(os.sched_getaffinity(0)),
      flush=True)
if os.environ.get("MYPLUGIN_REJOIN"):
  open(sys.argv[1], "w").close()
"""


def _cpus_by_rank(output: str, what: str) -> dict[int, list[int]]:
  found = re.findall(rf"\[(\d+)\] {what} cpus \[([0-9, ]*)\]", output)
  return {int(r): [int(c) for c in cpus.split(",")] for r, cpus in found}


def test_cpu_bind_gives_each_rank_its_share_and_a_restarted_rank_the_same(tmp_path):
  cpus = sorted(os.sched_getaffinity(0))
  r = run_python(LAUNCHER + ["-n", "2", "--cpu-bind", "--timeout", "150", "--", sys.executable, "-c", THREAD_CPUS],
                 child_env(), timeout=180)
  assert r.returncode == 0, r.output
  bound = _cpus_by_rank(r.stdout, r"threads \d+")
  assert sorted(bound) == [0, 1], r.output
  if len(cpus) >= 2:
    # Two halves of the launcher's CPUs, apart, together all of them.
    assert not set(bound[0]) & set(bound[1]), r.output
    assert sorted(bound[0] + bound[1]) == cpus, r.output
    assert abs(len(bound[0]) - len(bound[1])) <= 1, r.output
  else:
    assert bound[0] == bound[1] == cpus, r.output
  # Without it, every thread may run anywhere the launcher may.
  r = run_python(LAUNCHER + ["-n", "2", "--timeout", "150", "--", sys.executable, "-c", THREAD_CPUS],
                 child_env(), timeout=180)
  assert r.returncode == 0, r.output
  assert _cpus_by_rank(r.stdout, r"threads \d+") == {0: cpus, 1: cpus}, r.output
  # A rank started again runs on its rank's share.
  r = run_python(LAUNCHER + ["-n", "2", "--cpu-bind", "--recover", "1", "--timeout", "60", "--",
                             sys.executable, "-c", RESTARTED_CPUS, str(tmp_path / "restarted")],
                 child_env(), timeout=90)
  assert r.returncode == 0, r.output
  assert _cpus_by_rank(r.stdout, "first") == {0: bound[0]}, r.output
  assert _cpus_by_rank(r.stdout, "restarted") == {1: bound[1]}, r.output

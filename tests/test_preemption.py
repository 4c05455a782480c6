"""Preemption on myplugin's service: SIGTERM to one process, or to each,
is a notice; `multihost_utils.reached_preemption_sync_point(step)` is then
true at one step, the same on every process, that no process had passed
when the notice came (jax's protocol), and the signal does not end the
process. Without a notice it is never true. A notice while a process
compiles, or a second one while orbax saves the agreed step, changes none
of it; a second SIGTERM to the same process ends it, and the job with it."""
import bisect
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from job import HERE
from proc import child_env, kill_group, run_python

WORKER = f"{HERE}/programs/preemption_worker.py"
ORBAX = f"{HERE}/programs/preemption_orbax.py"
COMPILE = f"{HERE}/programs/preemption_compile.py"


def _results(stdout):
  return [json.loads(l.split("RESULT ", 1)[1]) for l in stdout.splitlines() if "RESULT " in l]


def _launch(n, argv, timeout=180):
  """myplugin-run -n N -- python ARGV; the launcher's own --timeout ends the
  ranks (their own process groups) before run_python's deadline would end it."""
  return run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--timeout", str(timeout - 30), "--",
                     sys.executable, *argv], child_env(), timeout=timeout)


def _run(n, notices, steps):
  r = _launch(n, [WORKER, notices, str(steps)])
  assert r.returncode == 0, r.output
  results = _results(r.stdout)
  assert sorted(res["rank"] for res in results) == list(range(n)), r.output
  return results, r.output


@pytest.mark.parametrize("n,notices,first", [(2, "1@7", 7), (2, "0@5,1@12", 5), (4, "2@9", 9),
                                             (4, "0@3,1@3,2@3,3@3", 3)])
def test_one_sync_step_for_every_process(n, notices, first):
  results, out = _run(n, notices, 300)
  synced = {res["synced"] for res in results}
  assert len(synced) == 1 and None not in synced, out
  step = synced.pop()
  # After the first notice, and soon after it (the processes are at most a
  # step apart, each step having a collective; the notice takes a few ms).
  assert first < step <= first + 20, out
  assert all(res["ran"] == step for res in results), out


def test_never_true_without_a_notice():
  results, out = _run(2, "none", 40)
  assert all(res["synced"] is None and res["ran"] == 40 for res in results), out


@pytest.fixture(scope="module")
def orbax_reference(tmp_path_factory):
  """The uninterrupted run of preemption_orbax.py (60 steps) on jax's CPU backend."""
  pytest.importorskip("orbax.checkpoint", reason="needs the clients extra: pip install '.[test,clients]'")
  ref = run_python([ORBAX, str(tmp_path_factory.mktemp("ref")), "none", "60"],
                   child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"), timeout=180)
  assert ref.returncode == 0, ref.output
  return _results(ref.stdout)[0]


def _orbax_job(ckpt, notices, *options, ok=True):
  r = _launch(2, [ORBAX, str(ckpt), notices, "60", *options], timeout=240)
  assert (r.returncode == 0) == ok, r.output
  return _results(r.stdout), r


def _resumes_to_the_reference(ckpt, want, start, *options):
  """A new job restores step `start` and ends with the uninterrupted run's loss."""
  results, r = _orbax_job(ckpt, "none", *options)
  assert len(results) == 2, r.output
  for res in results:
    assert res["start"] == start, r.output
    assert abs(res["loss"] - want["loss"]) <= 1e-5 * max(1.0, abs(want["loss"])), (res, want)
    assert max(abs(a - b) for a, b in zip(res["w"], want["w"])) <= 1e-5, (res, want)
  return results


def test_orbax_saves_the_sync_step_and_a_new_job_goes_on_from_it(tmp_path, orbax_reference):
  """CheckpointManager asks the sync point at every step (should_save): it
  saves the step every process agreed on, the job ends, and a new job
  restores that step and ends with the loss of an uninterrupted run on
  jax's CPU backend."""
  first, r = _orbax_job(tmp_path, "1@11")
  at = {res.get("preempted_at") for res in first}
  # No collective ties these processes' steps (the state is replicated):
  # the step is the same everywhere and after the notice, however far apart.
  assert len(at) == 1 and None not in at and 11 < min(at) < 60, r.output
  _resumes_to_the_reference(tmp_path, orbax_reference, min(at))


def test_sigterm_to_the_launcher_reaches_every_rank_and_the_job_says_preempted():
  """myplugin-run forwards a SIGTERM to its ranks (a scheduler signals the
  launcher) and gives them the grace period: they agree on a step, stop
  there, and the launcher exits 143, not as a failure."""
  p = subprocess.Popen([sys.executable, "-m", "jax_plugin.launcher", "-n", "2", "--grace-period", "60", "--",
                        sys.executable, WORKER, "none", "100000"], env=child_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd="/")
  lines = []

  def read():
    for line in iter(p.stdout.readline, ""):
      lines.append(line)

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  try:
    deadline = time.monotonic() + 120
    while sum("RUNNING" in l for l in lines) < 2 and p.poll() is None and time.monotonic() < deadline:
      time.sleep(0.05)
    assert sum("RUNNING" in l for l in lines) == 2, "".join(lines)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)
  finally:
    kill_group(p)
    p.wait(timeout=30)
  reader.join(timeout=10)
  out = "".join(lines)
  assert p.returncode == 143, out
  assert "forwarded to ranks [0, 1]" in out and "the job was preempted (exit 143)" in out, out
  results = [json.loads(l.split("RESULT ", 1)[1]) for l in lines if "RESULT " in l]
  assert len(results) == 2 and results[0]["synced"] == results[1]["synced"] is not None, out
  assert all(res["ran"] == res["synced"] for res in results), out


# preemption_compile.py: the step at which process 0 compiles, and how many
# operations its program has (about 4 s of XLA's compile on 2 cores; the
# test checks that the signal came during it).
COMPILE_AT = 5
COMPILE_OPS = 3000


def _step_at(started, t):
  """The step a process was in at wall time t (the last one it had begun)."""
  return bisect.bisect_right(started, t) - 1


@pytest.mark.parametrize("collective", [1, 0], ids=["collective-every-step", "steps-untied"])
@pytest.mark.parametrize("signalled", [0, 1], ids=["sigterm-to-the-compiling-process", "sigterm-to-the-other"])
def test_a_notice_during_a_long_compile(signalled, collective):
  """Process 0 is inside XLA's compile (several seconds) when SIGTERM
  comes, to it or to process 1: both still stop at one step, after every
  step either had begun, having run exactly the steps before it, and the
  job ends well within the launcher's grace period."""
  from jax_plugin.launcher import DEFAULT_GRACE_PERIOD_S
  r = _launch(2, [COMPILE, "0", str(signalled), str(COMPILE_OPS), str(collective)], timeout=150)
  assert r.returncode == 0, r.output
  results = {res["rank"]: res for res in _results(r.stdout)}
  assert sorted(results) == [0, 1], r.output
  compiler = results[0]
  sent = results[signalled]["sent"]
  # Else this tests nothing (retune COMPILE_OPS).
  assert compiler["compiled_from"] < sent < compiler["compiled_to"], r.output
  assert _step_at(compiler["started"], sent) == COMPILE_AT, r.output
  synced = {res["synced"] for res in results.values()}
  assert len(synced) == 1 and None not in synced, r.output
  step = synced.pop()
  at = {rank: _step_at(res["started"], sent) for rank, res in results.items()}
  assert all(res["ran"] == step for res in results.values()), r.output
  assert step > max(at.values()), (at, r.output)
  if collective:
    # A collective every step: neither could be more than a step past the compile.
    assert step <= COMPILE_AT + 2, r.output
  else:
    # Process 1 hears the notice at once, wherever it came: sent to it, it
    # runs on in Python and posts its step; sent to the compiling process,
    # a C++ handler there records it without waiting for the compile to
    # return (before, process 1 ran on through the whole compile, and the
    # compiling process then caught up on every one of those steps).
    assert step <= at[1] + 50, (at, r.output)
  assert max(res["started"][-1] for res in results.values()) - sent < DEFAULT_GRACE_PERIOD_S, r.output


# preemption_orbax.py --size: a state of 64 MB, whose save takes long enough
# for a signal sent right after manager.save() to come during the write.
SAVE_SIZE = ["--size", str(16_000_000)]


def _events(output, word):
  """(rank, fields...) of the lines `[rank] WORD fields...`."""
  return [(int(m[0]), *m[1].split()) for m in re.findall(rf"^\[(\d+)\] {word} (.*)$", output, re.M)]


def _complete_steps(ckpt):
  """The steps orbax finished writing (renamed into place, with its commit file)."""
  return {int(d) for d in os.listdir(ckpt) if d.isdigit() and os.path.exists(os.path.join(ckpt, d, "commit_success.txt"))}


def test_a_second_notice_during_the_save_changes_nothing(tmp_path, orbax_reference):
  """SIGTERM to process 1 (the notice), then to process 0 while orbax
  writes the agreed step: that is the same notice; the step is saved once,
  the job exits cleanly, a new job resumes from it."""
  first, r = _orbax_job(tmp_path, "1@11", *SAVE_SIZE, "--second", "0")
  at = {res.get("preempted_at") for res in first}
  assert len(first) == 2 and len(at) == 1 and None not in at and 11 < min(at) < 60, r.output
  step = at.pop()
  saving = {rank: float(t) for rank, s, t in _events(r.output, "SAVING") if int(s) == step}
  saved = [(rank, float(t)) for rank, s, t in _events(r.output, "SAVED") if int(s) == step]
  signalled = _events(r.output, "SIGNALLED")
  assert len(saving) == 2 and sorted(rank for rank, _ in saved) == [0, 1], r.output
  assert len(signalled) == 1 and signalled[0][0] == 0 and signalled[0][2] == "False", r.output
  assert saving[0] < float(signalled[0][1]) < dict(saved)[0], r.output
  # The initial save and the agreed step, nothing half written.
  assert sorted(os.listdir(tmp_path)) == ["1", str(step)] and _complete_steps(tmp_path) == {1, step}, r.output
  for res in _resumes_to_the_reference(tmp_path, orbax_reference, step, *SAVE_SIZE):
    assert res["big"] == [60.0], res


def test_a_second_sigterm_to_the_same_process_during_the_save_ends_the_job(tmp_path, orbax_reference):
  """Process 1 has its notice, then a second SIGTERM while orbax writes
  the agreed step: it ends (the documented default), process 0 fails
  naming it, the launcher exits with process 1's failure at once; a new job
  restores the last complete step, never the half-written one, and ends
  with the uninterrupted run's loss."""
  from jax_plugin.launcher import failure_exit_code
  _, r = _orbax_job(tmp_path, "1@11", *SAVE_SIZE, "--second", "1", ok=False)
  ended = time.time()
  assert r.returncode == failure_exit_code(1), r.output
  assert "rank 1 failed first (killed by SIGTERM)" in r.stderr, r.output
  assert re.search(r"^\[0\] .*process 1 failed", r.output, re.M), r.output
  assert not _results(r.stdout), r.output
  signalled = _events(r.output, "SIGNALLED")
  step = max(int(s) for rank, s, _ in _events(r.output, "SAVING") if rank == 1)
  assert len(signalled) == 1 and signalled[0][0] == 1 and signalled[0][2] == "False" and step > 11, r.output
  assert ended - float(signalled[0][1]) < 20, r.output
  complete = _complete_steps(tmp_path)
  assert complete in ({1}, {1, step}), (os.listdir(tmp_path), r.output)
  for res in _resumes_to_the_reference(tmp_path, orbax_reference, max(complete), *SAVE_SIZE):
    assert res["big"] == [60.0], res

"""Preemption on myplugin's service: SIGTERM to one process, or to each,
is a notice; `multihost_utils.reached_preemption_sync_point(step)` is then
true at one step, the same on every process, that no process had passed
when the notice came (jax's protocol), and the signal does not end the
process. Without a notice it is never true."""
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from job import HERE
from proc import child_env, kill_group, run_python

WORKER = f"{HERE}/programs/preemption_worker.py"


def _run(n, notices, steps):
  r = run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--", sys.executable, WORKER, notices, str(steps)],
                 child_env(), timeout=180)
  assert r.returncode == 0, r.output
  results = [json.loads(l.split("RESULT ", 1)[1]) for l in r.stdout.splitlines() if "RESULT " in l]
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


def test_orbax_saves_the_sync_step_and_a_new_job_goes_on_from_it(tmp_path):
  """CheckpointManager asks the sync point at every step (should_save): it
  saves the step every process agreed on, the job ends, and a new job
  restores that step and ends with the loss of an uninterrupted run on
  jax's CPU backend."""
  pytest.importorskip("orbax.checkpoint", reason="needs the clients extra: pip install '.[test,clients]'")
  program = f"{HERE}/programs/preemption_orbax.py"
  ref = run_python([program, str(tmp_path / "ref"), "none", "60"],
                   child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"), timeout=180)
  assert ref.returncode == 0, ref.output
  want = json.loads(ref.stdout.split("RESULT ", 1)[1])
  ckpt = str(tmp_path / "ckpt")

  def job(notices):
    r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--", sys.executable, program, ckpt, notices, "60"],
                   child_env(), timeout=240)
    assert r.returncode == 0, r.output
    return [json.loads(l.split("RESULT ", 1)[1]) for l in r.stdout.splitlines() if "RESULT " in l], r.output

  first, out = job("1@11")
  at = {res.get("preempted_at") for res in first}
  # No collective ties these processes' steps (the state is replicated):
  # the step is the same everywhere and after the notice, however far apart.
  assert len(at) == 1 and None not in at and 11 < min(at) < 60, out
  second, out = job("none")
  for res in second:
    assert res["start"] == min(at), out
    assert abs(res["loss"] - want["loss"]) <= 1e-5 * max(1.0, abs(want["loss"])), (res, want)
    assert max(abs(a - b) for a, b in zip(res["w"], want["w"])) <= 1e-5, (res, want)


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

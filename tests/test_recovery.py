"""In-place recovery (docs/clusters.md, "In-place recovery"): with fate-sharing off,
the survivors of a failure get an error naming the failed process from
every pending and later call, agree on one membership verdict (or all get
an error), and go on over the new membership. Every job here has hard
deadlines and is killed on the way out (tests/job.py)."""
import contextlib
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import Job  # noqa: E402

VICTIM = 2


@contextlib.contextmanager
def _job(scenario, n=4):
  """The service is hosted here, as the launcher hosts it: it outlives any rank."""
  from jax_plugin import _myplugin
  service = _myplugin.CoordinationService.start("127.0.0.1", 0, n, "", 5.0, 60.0)
  try:
    with Job(n, [scenario, str(VICTIM)], program="recovery_worker.py",
             env={"MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{service.port}",
                  "MYPLUGIN_COORDINATOR_STANDALONE": "1"}) as job:
      yield job
  finally:
    service.stop()


def test_survivors_get_the_failure_and_one_verdict():
  with _job("verdict") as job:
    codes = job.wait(timeout=120)
    survivors = [0, 1, 3]
    assert codes[VICTIM] == -9, job.all_output()
    assert all(codes[r] == 0 for r in survivors), job.all_output()
    verdicts = []
    for r in survivors:
      assert job.event(r, "barrier_passed") is None, job.all_output()
      # The pending barrier and the later key-value call both name the dead process.
      assert f"process {VICTIM} failed" in job.event(r, "barrier_error")["error"], job.all_output()
      assert f"process {VICTIM} failed" in job.event(r, "kv_error")["error"], job.all_output()
      v = job.event(r, "verdict")
      assert v is not None, job.all_output()
      verdicts.append(v)
      assert job.event(r, "survivors_barrier") is not None, job.all_output()
    # The same live set and the same new epoch on every survivor; each
    # survivor's index is its place among the members.
    assert all(v["members"] == [0, 1, 3] and v["epoch"] == 1 and v["changed"] for v in verdicts), verdicts
    assert [v["process_id"] for v in verdicts] == [0, 1, 2]
    assert all(v["num_processes"] == 3 for v in verdicts)


def test_agreement_that_cannot_be_reached_is_an_error_to_all():
  with _job("no_agreement", n=3) as job:
    codes = job.wait(timeout=120)
    for r in (0, 1):
      assert codes[r] == 0, job.all_output()
      assert job.event(r, "verdict") is None, job.all_output()
      err = job.event(r, "agreement_error")
      assert err is not None, job.all_output()
    # The one that asked in time hears who did not; the late one hears that
    # the job cannot recover.
    assert "processes [1] did not ask for it" in job.event(0, "agreement_error")["error"], job.all_output()
    assert "cannot recover" in job.event(1, "agreement_error")["error"], job.all_output()


def test_collective_fails_then_the_rebuilt_backend_computes_over_the_survivors():
  with _job("collective") as job:
    codes = job.wait(timeout=240)
    survivors = [0, 1, 3]
    assert all(codes[r] == 0 for r in survivors), job.all_output()
    for r in survivors:
      # Reference: the sum of (coordination id + 1) over the members' devices, one device each.
      assert job.event(r, "first")["total"] == 1 + 2 + 3 + 4, job.all_output()
      err = job.event(r, "collective_error")
      assert err is not None and job.event(r, "second_passed") is None, job.all_output()
      assert f"process {VICTIM} failed" in err["error"], err
      # jaxlib's error for the program's collective (on jax 0.10.2 a
      # ValueError for ABORTED), typed through errors.typed.
      assert err["type"] in ("JaxRuntimeError", "ValueError"), err
      assert (err["class"], err["processes"], err["jax_error"]) == ("PeerFailure", [VICTIM], True), err
      assert err["collective"] and isinstance(err["call"], int), err
      v = job.event(r, "verdict")
      assert v["members"] == survivors and v["changed"], v
      third = job.event(r, "third")
      assert third is not None, job.all_output()
      assert third["total"] == 1 + 2 + 4, third
      assert third["process_count"] == 3 and third["device_count"] == 3
      assert third["process_index"] == survivors.index(r)


@pytest.mark.parametrize("victim", [0, 1])
def test_straggler_report_after_a_recovery_follows_the_membership(tmp_path, victim):
  """A process dies (0: the reporter itself); the three survivors agree, and
  member 3 is late to an all-reduce: the first member reports it by its id,
  with its stack, and the dead process is neither waited for nor reported."""
  import re
  from jax_plugin import _myplugin
  members = [r for r in range(4) if r != victim]
  reporter = members[0]
  service = _myplugin.CoordinationService.start("127.0.0.1", 0, 4, "", 5.0, 60.0)
  try:
    with Job(4, ["straggler", str(victim)], program="recovery_worker.py",
             env={"MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{service.port}",
                  "MYPLUGIN_COORDINATOR_STANDALONE": "1", "MYPLUGIN_STRAGGLER_SECONDS": "1",
                  "MYPLUGIN_TRACE_DIR": str(tmp_path)}) as job:
      codes = job.wait(timeout=120)
      out = job.all_output()
      assert codes[victim] == -9 and all(codes[r] == 0 for r in members), out
      for r in members:
        assert job.event(r, "verdict")["members"] == members, out
        assert job.event(r, "sum")["total"] == sum(i + 1 for i in members), out
      text = job.output(reporter)
      assert "myplugin: straggler report #1" in text, out
      assert f"membership epoch 1: processes {members}" in text, out
      assert f"arrived: processes {members[:2]}; not arrived: processes [3]" in text, out
      report = text[text.index("straggler report #1"):]
      assert re.search(r"process 3 \(pid \d+ on ", report), out
      # Its own stack, fetched from it while it slept: the sleeping line of the program.
      program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "recovery_worker.py")
      with open(program) as f:
        line = next(i for i, text_line in enumerate(f, 1) if "# STRAGGLER_LINE" in text_line)
      assert re.search(rf'recovery_worker.py", line {line} in <module>', report), out
      # Nobody else reports, and the dead process is in no report.
      assert all("straggler report" not in job.output(r) for r in members[1:]), out
      assert f"process {victim} did not answer" not in text and f"process {victim} (pid" not in text, out
  finally:
    service.stop()


def _launcher_events(stdout):
  """The RESULT lines of a job run under myplugin-run, per rank, in order."""
  import json
  import re
  events = {}
  for rank, payload in re.findall(r"^\[(\d+)\] RESULT (.*)$", stdout, re.M):
    events.setdefault(int(rank), []).append(json.loads(payload))
  return events


def test_rank_started_again_at_once_while_its_old_connection_is_open():
  """The launcher starts a dead rank again the moment it reaps it, with no
  delay: the service hears of the death from the launcher, not from the
  connection, which the dead process's child still holds open (a heartbeat
  timeout of 30 s would notice it only much later). Three deaths in a row;
  every step's sum is the members' reference sum."""
  from proc import child_env, run_python
  deaths = 3
  r = run_python(["-m", "jax_plugin.launcher", "-n", "3", "--recover", str(deaths), "--rejoin-wait",
                  "--heartbeat-timeout", "30", "--timeout", "200", "--",
                  sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs",
                                               "recovery_worker.py"), "respawn", str(VICTIM), str(deaths)],
                 child_env(), timeout=260)
  assert r.returncode == 0, r.output
  assert "already taken" not in r.output, r.output
  events = _launcher_events(r.stdout)
  assert len([e for e in events[VICTIM] if e["event"] == "dying"]) == deaths, r.output
  assert r.stderr.count(f"myplugin-run: rank {VICTIM} failed (killed by SIGKILL)") == deaths, r.output
  # Each of its processes resumed where the members were when they let it in.
  starts = [e for e in events[VICTIM] if e["event"] == "started"]
  assert [e["deaths"] for e in starts] == list(range(deaths + 1)), starts
  assert starts[0]["step"] == 0 and all(e["step"] >= 2 + 3 * (e["deaths"] - 1) for e in starts[1:]), starts
  for rank in (0, 1):
    verdicts = [e for e in events[rank] if e["event"] == "verdict"]
    # Each rejoin is a verdict with it; epochs move by one each time.
    assert [v["epoch"] for v in verdicts] == list(range(1, len(verdicts) + 1)), verdicts
    assert [(v["epoch"], v["step"]) for v in verdicts if v["members"] == [0, 1, 2]] == \
        [(e["epoch"], e["step"]) for e in starts[1:]], (verdicts, starts)
    assert verdicts[-1]["members"] == [0, 1, 2], verdicts
    # Each process of the victim is a new incarnation, and every verdict
    # that let one in names it; the survivors' own never change.
    joined = [v["incarnations"][VICTIM] for v in verdicts if v["members"] == [0, 1, 2]]
    assert joined == [e["incarnations"][VICTIM] for e in starts[1:]], (verdicts, starts)
    assert len(set(joined + [starts[0]["incarnations"][VICTIM]])) == deaths + 1, starts
    assert {v["incarnations"][rank] for v in verdicts} == {starts[0]["incarnations"][rank]}, verdicts
    errors = [e for e in events[rank] if e["event"] == "step_error"]
    assert [e["step"] for e in errors] == [2, 5, 8], errors
    assert all(f"process {VICTIM} failed" in e["error"] for e in errors), errors
  for rank in (0, 1, 2):
    done = [e for e in events[rank] if e["event"] == "step"]
    # The reference: the members' (id + 1) * (step + 1), summed in numpy's float64 exactly.
    assert all(e["total"] == e["expected"] == sum(i + 1 for i in e["members"]) * (e["step"] + 1) for e in done), done
    assert done[-1]["step"] == 11 and done[-1]["members"] == [0, 1, 2], r.output
  # Every step ran exactly once on each survivor.
  assert [e["step"] for e in events[0] if e["event"] == "step"] == list(range(12)), r.output


def test_rank_failed_while_still_running_is_ended_and_started_again():
  """A stopped rank stays alive: the service fails it by its heartbeat, the
  members go on without it (and then wait for it), and the launcher ends it
  once it outlives its grace and starts it again (before, it was never
  ended, and the job waited for it until --timeout). Every step's sum is
  the members' reference sum."""
  from proc import child_env, run_python
  r = run_python(["-m", "jax_plugin.launcher", "-n", "3", "--recover", "1", "--rejoin-wait",
                  "--heartbeat-timeout", "3", "--timeout", "200", "--",
                  sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs",
                                               "recovery_worker.py"), "freeze", str(VICTIM), "1"],
                 child_env(), timeout=260)
  assert r.returncode == 0, r.output
  assert (f"myplugin-run: rank {VICTIM} was declared failed by the coordination service and its process was "
          "still running 5 s later; ending it") in r.stderr, r.output
  assert f"myplugin-run: rank {VICTIM} failed (killed by SIGKILL); starting it again" in r.stderr, r.output
  events = _launcher_events(r.stdout)
  assert [e["event"] for e in events[VICTIM]].count("freezing") == 1, r.output
  starts = [e for e in events[VICTIM] if e["event"] == "started"]
  assert [e["deaths"] for e in starts] == [0, 1], starts
  for rank in (0, 1):
    errors = [e for e in events[rank] if e["event"] == "step_error"]
    assert [e["step"] for e in errors] == [2], errors
    assert f"process {VICTIM} failed: stopped responding" in errors[0]["error"], errors
  for rank in (0, 1, 2):
    done = [e for e in events[rank] if e["event"] == "step"]
    assert all(e["total"] == e["expected"] == sum(i + 1 for i in e["members"]) * (e["step"] + 1) for e in done), done
    assert done[-1]["step"] == 11 and done[-1]["members"] == [0, 1, 2], r.output
  assert [e["step"] for e in events[0] if e["event"] == "step"] == list(range(12)), r.output


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "elastic_training.py")
# The job is 4 processes, 200 steps, a checkpoint every 20, rank 2
# killed at step 50; on a 2-core machine the test runs a smaller one.
SMALL = ["--steps", "40", "--checkpoint-every", "10", "--kill-rank", "2", "--kill-step", "15"]


def _final_loss(text):
  import re
  found = re.findall(r"final loss ([0-9.]+)", text)
  assert found, text
  return float(found[-1])


@pytest.fixture(scope="module")
def reference_loss():
  """The uninterrupted run on jax's CPU backend, one process: the global
  batch of a step does not depend on the membership, so every schedule of
  failures and rollbacks ends here (one run serves both tests)."""
  from proc import child_env, run_python
  r = run_python([EXAMPLE, "--reference", *SMALL], child_env(JAX_PLATFORMS="cpu"), timeout=240)
  assert r.returncode == 0, r.output
  return _final_loss(r.stdout)


def test_elastic_training_recovers_in_place_and_the_rank_rejoins(reference_loss):
  from proc import child_env, run_python
  r = run_python(["-m", "jax_plugin.launcher", "-n", "3", "--recover", "1", "--rejoin-wait", "--timeout", "400", "--",
                  sys.executable, EXAMPLE, *SMALL], child_env(), timeout=480)
  assert r.returncode == 0, r.output
  assert "[2] rank 2 kills itself at step 15" in r.stdout, r.output
  import re
  for rank in (0, 1):
    assert re.search(rf"\[{rank}\] error: .*process 2 failed", r.stdout), r.output
  # The survivors agree without it or (when the launcher had already
  # started it again) with it; it is a member again at the end.
  epochs = {rank: re.findall(rf"\[{rank}\] epoch (\d+): members \[([0-9, ]+)\], resuming at step (\d+)", r.stdout)
            for rank in (0, 1, 2)}
  assert epochs[0] == epochs[1] and epochs[0], r.output
  assert epochs[0][-1][1] == "0, 1, 2" and epochs[2] == [epochs[0][-1]], r.output
  assert "myplugin-run: rank 2 failed" in r.stderr and "starting it again" in r.stderr, r.output
  assert _final_loss(r.stdout) == pytest.approx(reference_loss, rel=1e-4)


def test_elastic_training_restarts_from_its_checkpoint(tmp_path, reference_loss):
  from proc import child_env, run_python
  r = run_python(["-m", "jax_plugin.launcher", "-n", "3", "--max-restarts", "1", "--timeout", "400", "--",
                  sys.executable, EXAMPLE, *SMALL, "--mode", "restart", "--dir", str(tmp_path)],
                 child_env(), timeout=480)
  assert r.returncode == 0, r.output
  assert "restarting the job (restart 1 of 1)" in r.stderr, r.output
  assert "[0] restart: resuming at step 10" in r.stdout, r.output
  assert _final_loss(r.stdout) == pytest.approx(reference_loss, rel=1e-4)

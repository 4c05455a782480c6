"""In-place recovery (README "In-place recovery"): with fate-sharing off,
the survivors of a failure get an error naming the failed process from
every pending and later call, agree on one membership verdict (or all get
an error), and go on over the new membership. Every job here has hard
deadlines and is killed on the way out (tests/job.py)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import Job  # noqa: E402

VICTIM = 2


def _job(scenario, n=4):
  return Job(n, [scenario, str(VICTIM)], program="recovery_worker.py")


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
      v = job.event(r, "verdict")
      assert v["members"] == survivors and v["changed"], v
      third = job.event(r, "third")
      assert third is not None, job.all_output()
      assert third["total"] == 1 + 2 + 4, third
      assert third["process_count"] == 3 and third["device_count"] == 3
      assert third["process_index"] == survivors.index(r)

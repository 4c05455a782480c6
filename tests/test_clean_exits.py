"""A job that succeeds ends cleanly and at once: the same program many
times under myplugin-run, with each process shape and transport, on a
machine kept busy (a spinning process for every two cores: the race
below needs a device's part to start late), ends with exit 0, every rank's
result equal to numpy's, and no collective error printed after the results
(before the shutdown barrier waited for every local device's part of the
programs launched, 1 to 4 runs in 10 printed "finished (entered shutdown)
without issuing it", and some stalled until the collective timeout)."""
import os
import sys
import time

import numpy as np
import pytest

from busy import busy
from job import HERE
from proc import child_env, run_python

PROGRAM = os.path.join(HERE, "programs", "gather_then_exit.py")
RUNS = int(os.environ.get("TEST_CLEAN_EXIT_RUNS", "6"))


@pytest.fixture(scope="module")
def busy_machine():
  with busy():
    yield


def expected(processes, devices_per_process):
  del devices_per_process
  a = np.concatenate([np.arange(4, dtype=np.int32) + p for p in range(processes)]).tolist()
  return f"RESULT {a} {list(range(processes))}"


@pytest.mark.parametrize("processes,devices,transport", [(2, 2, "shm"), (2, 2, "gloo"), (4, 1, "shm"), (4, 1, "gloo")])
def test_gathers_then_exit_end_cleanly_every_time(processes, devices, transport, busy_machine):
  want = expected(processes, devices)
  for run in range(RUNS):
    r = run_python(["-m", "jax_plugin.launcher", "-n", str(processes), "--devices-per-process", str(devices), "--",
                    sys.executable, PROGRAM], child_env(MYPLUGIN_TRANSPORT=transport), timeout=120)
    where = f"run {run}, {processes} x {devices}, {transport}:\n{r.output}"
    assert r.returncode == 0, where
    results = [l.split("] ", 1)[1] for l in r.stdout.splitlines() if "RESULT" in l]
    assert results == [want] * processes, where
    assert "myplugin:" not in r.output.replace("myplugin-run:", ""), where  # no error, no notice


ENDS = os.path.join(HERE, "programs", "end_ways.py")
_FAILED = "myplugin-run: rank 1 failed first "
_ENDED = "; ranks [0] were ended because of it (exit code 42); all ranks were ended"
_LOST = "(process 1 failed: lost its connection without an orderly shutdown (it exited, crashed or was killed))"


@pytest.mark.parametrize("way,code,report", [
    ("return", 0, None),
    ("inflight", 0, None),
    ("sending", 0, None),
    ("exit3", 101, _FAILED + "with exit code 3"),
    ("raise", 101, _FAILED + "with exit code 1 (process 1 failed: exited with an uncaught exception: ValueError: "
     "bad end)" + _ENDED),
    ("os_exit", 101, _FAILED + "with exit code 4 " + _LOST + _ENDED),
    ("sigterm", 101, _FAILED + "(killed by SIGTERM) " + _LOST + _ENDED),
    ("sigint", 101, _FAILED + "(killed by SIGINT) (process 1 failed: exited with an uncaught exception: "
     "KeyboardInterrupt: )" + _ENDED),
])
def test_each_way_a_program_ends_is_reported_as_it_happened(way, code, report):
  """The sweep: rank 1 of 2 ends its program each way, after a collective
  whose result both ranks print. The launcher's exit code and summary say
  what the rank did (its own exit status or signal), with the reason the
  service recorded; a job that succeeds (a collective still in flight
  included) prints nothing of ours. Each ends at once: no stall."""
  start = time.monotonic()
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--", sys.executable, ENDS, way], child_env(), timeout=120)
  took = time.monotonic() - start
  assert r.returncode == code, r.output
  assert r.stdout.count("RESULT [[0, 1, 2, 3], [1, 2, 3, 4]]") == 2, r.output
  if report is None:
    assert "myplugin:" not in r.output.replace("myplugin-run:", ""), r.output
    assert way != "inflight" or "[0] SUM 2.0" in r.stdout, r.output
    assert way != "sending" or "[1] RECEIVED True" in r.stdout, r.output
  else:
    assert report in r.stderr, r.output
  assert took < 60, f"{way} took {took:.1f} s:\n{r.output}"

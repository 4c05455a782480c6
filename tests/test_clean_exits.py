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

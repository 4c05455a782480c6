"""jax.device_put onto another process's devices (jax's cross-host
transfer, through our PJRT CrossHostTransfers extension): every case of
tests/programs/cross_host_worker.py equals numpy on the receiving process,
and the other process holds no shard of the result."""
import json
import sys

from job import HERE
from proc import child_env, run_python

WORKER = f"{HERE}/programs/cross_host_worker.py"


def test_device_put_across_processes_equals_numpy():
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "2", "--",
                  sys.executable, WORKER], child_env(), timeout=240)
  assert r.returncode == 0, r.output
  results = [json.loads(l.split("RESULT ", 1)[1]) for l in r.stdout.splitlines() if "RESULT " in l]
  assert sorted(res.pop("rank") for res in results) == [0, 1], r.output
  for res in results:
    assert len(res) == 15 and all(res.values()), (res, r.output)

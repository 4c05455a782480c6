"""A multi-process job whose processes run programs on their own devices:
jax names devices by global id, the engine by its own, and the plugin
translates. Programs over every process's devices run beside them."""
import numpy as np

from job import Job


def test_local_programs_in_a_multi_process_job():
  with Job(2, [], program="local_programs_worker.py",
           env={"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2"}) as job:
    assert job.wait(timeout=180) == {0: 0, 1: 0}, job.all_output()
    sums = []
    for r in range(2):
      d = job.event(r, "done")
      assert d["local_ids"] == [2 * r, 2 * r + 1]
      assert d["device_processes"] == [0, 0, 1, 1]
      assert d["default_device"] == [2 * r]
      np.testing.assert_array_equal(d["jit"], (np.arange(8.0) + r) * 2 + 1)
      assert d["mesh_devices"] == [2 * r, 2 * r + 1]
      want = float(np.sum((np.arange(16.0) * (r + 1)) ** 2))
      assert d["mesh_sum"] == want
      sums.append(want)
      assert d["spanning"] == {str(2 * r): [2 * r + 1.0], str(2 * r + 1): [2 * r + 2.0]}
    for r in range(2):
      assert job.event(r, "done")["all_processes_sum"] == sum(sums)

"""NCCL collectives across processes, one process per GPU, launched with
myplugin-run: the collectives example against jax's CPU backend, and the
all-reduce bus bandwidth (printed, never asserted). Needs 2 GPUs (skipped
below that); processes sharing one GPU are test_nccl_shared_gpu.py's."""
import os
import re
import sys

import numpy as np
import pytest

from conftest import gpu_count
from proc import child_env, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs (one process per GPU)")


def launch(program, *args, timeout=300):
  # Each rank sees one GPU: local_device_ids through MYPLUGIN_VISIBLE_DEVICES.
  wrapper = ("import os, runpy, sys; os.environ['MYPLUGIN_VISIBLE_DEVICES'] = os.environ['MYPLUGIN_PROCESS_ID']; "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
  # The launcher ends the job before the test's own deadline, naming the rank that hung.
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "1", "--timeout", str(timeout - 30),
                  "--", sys.executable, "-c", wrapper, program, *args],
                 child_env(MYPLUGIN_ENGINE="cuda", **{k: os.environ[k] for k in ("MYPLUGIN_SHADOW_ENGINE_PATH",)
                                                      if os.environ.get(k)}), timeout=timeout)
  assert r.returncode == 0, r.output
  return r


def test_multiprocess_collectives_match_cpu(tmp_path):
  example = os.path.join(ROOT, "examples", "shard_map_collectives.py")
  ref = tmp_path / "ref.npz"
  r = run_python([example, "--save", str(ref)], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"), timeout=300)
  assert r.returncode == 0, r.output
  out = str(tmp_path / "gpu.{rank}.npz")
  launch(example, "--save", out)
  want = np.load(ref)
  for rank in range(2):
    got = np.load(out.format(rank=rank))
    for key in got.files:
      np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=f"rank {rank} {key}")


def test_multiprocess_all_reduce_bandwidth():
  r = launch(os.path.join(ROOT, "bench", "multiprocess_worker.py"), ",".join(str(4096 << (2 * i)) for i in range(9)))
  for line in r.stdout.splitlines():
    m = re.search(r"RESULT psum (\d+) ([0-9.e-]+) ([0-9.e-]+)", line)
    if m:
      size, best = int(m.group(1)), float(m.group(2))
      print(f"psum {size} bytes: {size / best / 1e9:.2f} GB/s algorithm bandwidth (best)")

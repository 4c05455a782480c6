"""Multi-process programs over other processes' devices, and resharding
across processes.

- A program whose devices all belong to other processes compiles and runs
  on every process; the processes outside it do no work and hold no shard
  (jax's multi-process semantics), its collectives run among its own
  processes only, and a program over every device still completes after.
- Resharding a global array onto meshes of other shapes and device orders
  (every replica-group form the partitioner prints) gives every process the
  shards that jax's CPU backend gives the same devices in one process.
"""
from __future__ import annotations

import ast
import os
import re
import sys

import numpy as np
import pytest

from job import Job
from proc import child_env, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")


@pytest.mark.parametrize("n,d", [(4, 2), (3, 1)])
def test_programs_on_other_processes_devices(n, d):
  env = {"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": str(d), "MYPLUGIN_HEARTBEAT_TIMEOUT": "10"}
  with Job(n, [], program="remote_worker.py", env=env) as job:
    codes = job.wait(timeout=150)
    out = job.all_output()
    assert all(c == 0 for c in codes.values()), out
    results = {rank: job.event(rank, "done") for rank in range(n)}
  assert all(results.values()), out
  x = np.arange(4.0 * d * 2).reshape(2 * d, 4)
  ids = lambda *procs: [p * d + j for p in procs for j in range(d)]  # noqa: E731

  def check(name, want, devices, rows):
    """Every process: jax's view of the whole array; the owners of `devices`
    hold `want`'s block at each device (rows: rows per device, None for a
    replicated result); the others hold nothing."""
    for rank, res in results.items():
      got = res[name]
      assert got["shape"] == list(np.shape(want)), (rank, name, got)
      assert got["devices"] == devices, (rank, name, got)
      mine = [i for i in devices if i // d == rank]
      assert got["fully_addressable"] == (len(mine) == len(devices)), (rank, name, got)
      assert sorted(int(k) for k in got["shards"]) == mine, (rank, name, got)
      for k, shard in got["shards"].items():
        block = want if rows is None else want[devices.index(int(k)) * rows:][:rows]
        np.testing.assert_allclose(np.asarray(shard["data"]), block, err_msg=f"rank {rank} {name} device {k}")

  one = ids(1)
  check("one_put", x, one, 2)
  check("one_affine", x * 2 + 1, one, 2)
  check("one_colsum", x.sum(0), one, None)
  for rank, res in results.items():  # jax's own error for a deleted array, on every process
    assert "Array has been deleted" in res["one_deleted"], (rank, res["one_deleted"])
  pair = ids(1, 2)
  rows = 2 * d // len(pair)
  check("pair_total", np.sum(x * x), pair, None)
  check("pair_rolled", np.roll(x, 1, axis=0), pair, rows)
  check("single", x - 3, [n * d - 1], None)
  check("every_sum", np.arange(8.0 * d * n).sum(), ids(*range(n)), None)


@pytest.fixture(scope="module")
def reshard_reference(tmp_path_factory):
  out = tmp_path_factory.mktemp("cpu") / "reshard.npz"
  r = run_python([os.path.join(PROGRAMS, "reshard_worker.py"), str(out)],
                 child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8"), timeout=240)
  assert r.returncode == 0, r.output
  return dict(np.load(out))


@pytest.mark.parametrize("n,d", [(2, 4), (4, 2)])
def test_resharding_across_processes(tmp_path, reshard_reference, n, d):
  """Each process's shards equal the one-process result at the same index,
  on the same devices, for every case."""
  out = str(tmp_path / "reshard.{rank}.npz")
  r = run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--devices-per-process", str(d), "--",
                  sys.executable, os.path.join(PROGRAMS, "reshard_worker.py"), out], child_env(), timeout=300)
  assert r.returncode == 0, r.output
  ref = reshard_reference
  names = {k for k in ref if "." not in k}
  assert len(names) >= 12, names
  seen = set()
  for rank in range(n):
    got = dict(np.load(out.format(rank=rank)))
    local = set(range(rank * d, (rank + 1) * d))
    for key, value in got.items():
      m = re.fullmatch(r"(.*)\.shard\.(\d+)", key)
      if not m:
        continue
      name, device = m.group(1), int(m.group(2))
      assert device in local, key
      layout = dict(ast.literal_eval(str(ref[f"{name}.layout"])))
      assert str(got[f"{name}.index.{device}"]) == layout[device], (rank, key)
      index = eval(layout[device], {"slice": slice})  # e.g. (slice(0, 2, None), slice(None, None, None))
      np.testing.assert_array_equal(value, ref[name][index], err_msg=f"rank {rank}: {key}")
      seen.add((name, device))
  assert seen == {(name, dev) for name in names for dev in range(8)}, sorted(seen)

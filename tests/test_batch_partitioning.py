"""Batch-partitionable FFI calls run once per shard: jax registers its
LAPACK calls (Cholesky, LU, QR, eigh, SVD, triangular solve) as batch
partitionable, through the PJRT custom-partitioner extension, which the
CPU engine that partitions lacks. myplugin keeps the names and has jaxlib's
XLA partition a program that calls one (spmd/jaxlib_partitioned_targets.h).
Before, the compiled program all-gathered the batch onto every device and
ran the whole call there (8x the work on 8 devices). Against jax's CPU
backend in the same shape: one process of 8 devices, and 2 processes of 2."""
from __future__ import annotations

import os

import numpy as np

from proc import child_env, run_python
from test_multiprocess_programs import PROGRAMS, launch, load

PROGRAM = os.path.join(PROGRAMS, "batched_linalg.py")
OPS = ("cholesky", "lu", "qr", "eigh", "svd", "triangular_solve")


def _compare(ours: dict, ref: dict, devices: int, processes: int) -> None:
  for op in OPS:
    assert not bool(ref[f"{op}.gathers"]), f"{op}: jax's CPU backend gathers"
    assert not bool(ours[f"{op}.gathers"]), f"{op}: the compiled program gathers the batch"
    # One matrix of the batch a device: the call runs on its shard.
    assert ours[f"{op}.batches"].tolist() == ref[f"{op}.batches"].tolist() == [1], (op, ours[f"{op}.batches"])
    np.testing.assert_allclose(ours[op], ref[op], rtol=1e-6, atol=1e-6, err_msg=f"{op}, {processes} x {devices}")


def test_one_process_of_eight_devices(tmp_path):
  out = {}
  for side, env in (("cpu", dict(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8")),
                    ("myplugin", dict(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8"))):
    path = str(tmp_path / f"{side}.{{rank}}.npz")
    r = run_python([PROGRAM, path], child_env(**env), timeout=240)
    assert r.returncode == 0, r.output
    out[side] = load(path.format(rank=0))
  _compare(out["myplugin"], out["cpu"], 8, 1)


def test_two_processes_of_two_devices(tmp_path):
  ref = str(tmp_path / "cpu.{rank}.npz")
  launch(2, 2, PROGRAM, ref, "--distributed", timeout=300, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2")
  ours = str(tmp_path / "mp.{rank}.npz")
  launch(2, 2, PROGRAM, ours, "--distributed", timeout=300)
  for rank in range(2):
    _compare(load(ours.format(rank=rank)), load(ref.format(rank=rank)), 2, 2)

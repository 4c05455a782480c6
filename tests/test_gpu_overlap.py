"""bench/gpu_overlap.py, which reads from a GPU profile whether NCCL's
kernels ran beside the GEMMs (bench/gpu_multiprocess.py --profile), on
kernel timelines with known answers."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import gpu_overlap  # noqa: E402


def test_gemm_time_beside_nccl_on_another_stream():
  events = [
      ("Stream #7(compute)", "gemm_fusion_dot_1", 0, 100),
      ("Stream #9(collective)", "ncclDevKernel_AllGather_RING_LL", 50, 100),  # covers 50..100 of the first
      ("Stream #7(compute)", "sm90_xmma_gemm_bf16bf16_tn", 120, 100),  # 120..150 beside it
      ("Stream #7(compute)", "loop_add_fusion", 150, 10),  # no GEMM
      ("Stream #9(collective)", "ncclDevKernel_ReduceScatter_Sum", 200, 100),  # 200..220 of the second
      ("Stream #7(compute)", "ncclKernel_on_the_compute_stream", 300, 50),
      ("Stream #7(compute)", "cutlass_gemm", 300, 50),  # an NCCL kernel on its own stream is no overlap
  ]
  found = gpu_overlap.overlap(events)
  assert (found["gemm_kernels"], found["nccl_kernels"]) == (3, 3)
  assert found["gemm_ns"] == 250 and found["gemm_ns_beside_nccl"] == 50 + 30 + 20
  assert found["share"] == pytest.approx(100 / 250)
  assert "40.0 % of the GEMM time" in gpu_overlap.describe(found)


def test_overlapping_nccl_kernels_count_once_and_no_gemm_is_zero():
  events = [("compute", "gemm", 0, 100), ("comm", "ncclA", 10, 50), ("comm2", "ncclB", 40, 40)]
  assert gpu_overlap.overlap(events)["gemm_ns_beside_nccl"] == 70  # 10..80, once
  assert gpu_overlap.overlap([("comm", "ncclA", 0, 10)])["share"] == 0.0
  assert gpu_overlap.from_profile("/nonexistent") is None

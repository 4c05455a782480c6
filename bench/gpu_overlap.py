"""Whether NCCL's kernels ran beside the GEMMs, read from a jax profile of a
GPU job (bench/gpu_multiprocess.py --profile; issue 51, item 7).

A GPU's plane in the profile (`/device:GPU:<n>`) has a line per CUDA stream
and an event per kernel. A kernel whose name holds "nccl" is NCCL's; one
whose name holds gemm, gemv, matmul, xmma, cutlass or cublas (or a Triton
GEMM fusion's name) is a GEMM. The measure: of the GEMM kernels' time, the
share during which an NCCL kernel was running on another stream of the same
GPU (0 when every collective ran on the compute stream, between kernels).

  python bench/gpu_overlap.py PROFILE_DIR    (a jax.profiler.trace folder)
"""
from __future__ import annotations

import glob
import os
import re
import sys

_GEMM = re.compile(r"gemm|gemv|matmul|xmma|cutlass|cublas|sm\d+_.*_tn|dot", re.IGNORECASE)


def overlap(events: list[tuple[str, str, int, int]]) -> dict:
  """events: (stream line, kernel name, start ns, duration ns) of one GPU.
  Returns the GEMM and NCCL kernel counts and times, and the GEMM time with
  an NCCL kernel running on another stream."""
  nccl = sorted((s, s + d, line) for line, name, s, d in events if "nccl" in name.lower())
  gemms = [(s, s + d, line) for line, name, s, d in events if "nccl" not in name.lower() and _GEMM.search(name)]
  beside = 0
  for start, end, line in gemms:
    spans = sorted((max(start, a), min(end, b)) for a, b, other in nccl if other != line and a < end and b > start)
    covered, reach = 0, start
    for a, b in spans:
      if b > reach:
        covered += b - max(a, reach)
        reach = b
    beside += covered
  gemm_ns = sum(e - s for s, e, _ in gemms)
  return {"gemm_kernels": len(gemms), "gemm_ns": gemm_ns, "nccl_kernels": len(nccl),
          "nccl_ns": sum(e - s for s, e, _ in nccl), "gemm_ns_beside_nccl": beside,
          "share": beside / gemm_ns if gemm_ns else 0.0}


def from_profile(folder: str) -> dict | None:
  """overlap() of the first GPU plane of the profile under `folder`; None
  when there is no profile or no GPU plane (a CPU run)."""
  paths = sorted(glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb")))
  if not paths:
    return None
  from jax.profiler import ProfileData
  space = ProfileData.from_file(paths[-1])
  for plane in space.planes:
    if not plane.name.startswith("/device:GPU:"):
      continue
    events = [(line.name, e.name, int(e.start_ns), int(e.duration_ns)) for line in plane.lines for e in line.events]
    return overlap(events)
  return None


def describe(found: dict | None) -> str:
  if found is None:
    return "no GPU plane in the profile (a CPU run, or no profile was taken)"
  return (f"{found['gemm_kernels']} GEMM kernels ({found['gemm_ns'] / 1e6:.2f} ms), {found['nccl_kernels']} NCCL "
          f"kernels ({found['nccl_ns'] / 1e6:.2f} ms); {found['share'] * 100:.1f} % of the GEMM time ran beside an "
          "NCCL kernel on another stream")


if __name__ == "__main__":
  print(describe(from_profile(sys.argv[1])))

"""Which XLA engine myplugin layers over: XLA's CPU engine, or on a machine
with NVIDIA GPUs, XLA's CUDA engine.

  MYPLUGIN_ENGINE=cpu            the CPU engine (package lammps-jax-pjrt-cpu)
  MYPLUGIN_ENGINE=cuda           the CUDA engine (package jax-cuda12-pjrt, pip install 'myplugin[cuda12]');
                                 an error that names what is missing if it cannot run
  MYPLUGIN_ENGINE=/path/to.so    any PJRT plugin library (MYPLUGIN_ENGINE_PATH too, for compatibility)
  unset                          CUDA when a GPU, its driver and the CUDA engine are all present, else CPU

Detecting a GPU never initializes CUDA: it counts /proc/driver/nvidia/gpus
and loads libcuda.so.1 without calling it, so a machine without a driver
gets a clean "no", never a crash.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import os
from typing import Callable

CPU_PACKAGE, CPU_FILE = "lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so"
CUDA_PACKAGE, CUDA_FILE = "jax_plugins.xla_cuda12", "xla_cuda_plugin.so"
CUDA_DISTRIBUTION = "jax-cuda12-pjrt"


class EngineSelectionError(RuntimeError):
  pass


@dataclasses.dataclass(frozen=True)
class Engine:
  kind: str  # "cpu" or "cuda": how the plugin talks to it (client options, FFI platform)
  path: str | None
  reason: str


def package_file(package: str, name: str) -> str | None:
  """`name` inside an installed package, or None."""
  try:
    spec = importlib.util.find_spec(package)
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.submodule_search_locations:
    return None
  path = os.path.join(list(spec.submodule_search_locations)[0], name)
  return path if os.path.exists(path) else None


def probe_gpus(proc_dir: str = "/proc/driver/nvidia/gpus",
               load: Callable[[str], object] = ctypes.CDLL) -> tuple[int, str]:
  """(number of NVIDIA GPUs usable, why not when 0)."""
  try:
    gpus = len(os.listdir(proc_dir))
  except OSError:
    return 0, "no NVIDIA driver (no /proc/driver/nvidia)"
  if gpus == 0:
    return 0, "the NVIDIA driver sees no GPU"
  try:
    load("libcuda.so.1")
  except OSError as e:
    return 0, f"the CUDA driver library does not load ({e})"
  return gpus, f"{gpus} NVIDIA GPU(s)"


def select(env=None, probe=probe_gpus, find=package_file) -> Engine:
  env = os.environ if env is None else env
  requested = env.get("MYPLUGIN_ENGINE", "").strip()
  legacy_path = env.get("MYPLUGIN_ENGINE_PATH", "").strip()
  if requested and requested not in ("cpu", "cuda", "auto"):
    return Engine(_kind_of_path(requested, env), requested, "MYPLUGIN_ENGINE names a library")
  if legacy_path and not requested:
    return Engine(_kind_of_path(legacy_path, env), legacy_path, "MYPLUGIN_ENGINE_PATH")
  cpu = find(CPU_PACKAGE, CPU_FILE)
  if requested == "cpu":
    return Engine("cpu", cpu, "MYPLUGIN_ENGINE=cpu")
  gpus, why = probe()
  cuda = find(CUDA_PACKAGE, CUDA_FILE)
  if requested == "cuda":
    if gpus == 0:
      raise EngineSelectionError(f"MYPLUGIN_ENGINE=cuda, but no CUDA driver/GPU found: {why}")
    if cuda is None:
      raise EngineSelectionError(f"MYPLUGIN_ENGINE=cuda, but the CUDA engine is not installed: pip install "
                                 f"'myplugin[cuda12]' (package {CUDA_DISTRIBUTION})")
    return Engine("cuda", cuda, f"MYPLUGIN_ENGINE=cuda ({why})")
  if gpus > 0 and cuda is not None:
    return Engine("cuda", cuda, why)
  reason = why if gpus == 0 else f"{why}, but {CUDA_DISTRIBUTION} is not installed"
  return Engine("cpu", cpu, f"CPU engine: {reason}")


def _kind_of_path(path: str, env) -> str:
  kind = env.get("MYPLUGIN_ENGINE_KIND", "").strip()
  if kind in ("cpu", "cuda"):
    return kind
  return "cuda" if "cuda" in os.path.basename(path).lower() else "cpu"

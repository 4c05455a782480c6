"""Which XLA engine myplugin layers over: XLA's CPU engine, or on a machine
with NVIDIA GPUs, XLA's CUDA engine.

  MYPLUGIN_ENGINE=cpu            the CPU engine: the one shipped in this package (jax_plugin/engine/,
                                 lammps-jax-pjrt-cpu's library), else an installed lammps-jax-pjrt-cpu
  MYPLUGIN_ENGINE=cuda           the CUDA engine (package jax-cuda13-pjrt or jax-cuda12-pjrt: pip install
                                 'myplugin[cuda13]' or 'myplugin[cuda12]'); an error that names what is
                                 missing if it cannot run
  MYPLUGIN_ENGINE=/path/to.so    any PJRT plugin library (MYPLUGIN_ENGINE_PATH too, for compatibility)
  unset                          CUDA when a GPU, its driver and the CUDA engine are all present, else CPU

With both CUDA engines installed, the one whose release equals jaxlib's
wins (jax's own CUDA plugin must match jaxlib too), then CUDA 13 (drivers
from 580 on run both; older ones only 12).

The NCCL library for the collectives: MYPLUGIN_NCCL_PATH if set (a path
that is not a file is an error naming it), else libnccl.so.2 from the
nvidia-nccl-cu13 or nvidia-nccl-cu12 wheel (both install it under
nvidia/nccl/lib), else the system's.

Compiling for GPUs without one (compile-only topologies) uses the CUDA
engine whose release equals jaxlib's, GPU or not (compile_engine).

Detecting a GPU never initializes CUDA: it counts /proc/driver/nvidia/gpus
and loads libcuda.so.1 without calling it, so a machine without a driver
gets a clean "no", never a crash.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.metadata
import importlib.util
import os
from typing import Callable

CPU_PACKAGE, CPU_FILE = "lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so"
CPU_DISTRIBUTION = "lammps-jax-pjrt-cpu"
# Where the wheel ships the CPU engine (CMakeLists.txt, MYPLUGIN_BUNDLE_ENGINE),
# with a RELEASE file naming the release it was taken from.
BUNDLED_PACKAGE = "jax_plugin.engine"
CUDA_FILE = "xla_cuda_plugin.so"
# (module, distribution), most preferred first when versions do not decide.
CUDA_ENGINES = (("jax_plugins.xla_cuda13", "jax-cuda13-pjrt"), ("jax_plugins.xla_cuda12", "jax-cuda12-pjrt"))
CUDA_INSTALL_HINT = "pip install 'myplugin[cuda13]' (or 'myplugin[cuda12]' for drivers before 580)"
# Where the NCCL wheels put the library, relative to their packages.
NCCL_FILES = (("nvidia.nccl", "lib/libnccl.so.2"), ("nvidia.cu13", "lib/libnccl.so.2"))


class EngineSelectionError(RuntimeError):
  pass


@dataclasses.dataclass(frozen=True)
class Engine:
  kind: str  # "cpu" or "cuda": how the plugin talks to it (client options, FFI platform)
  path: str | None
  reason: str
  release: str | None = None  # "lammps-jax-pjrt-cpu 0.11.2", "jax-cuda13-pjrt 0.12.0.1"; None: a user's library


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


def distribution_version(name: str) -> str | None:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def find_cuda_engine(find=package_file, version=distribution_version) -> tuple[str | None, str]:
  """(path of the CUDA engine to load or None, its distribution or what to install)."""
  found = [(find(module, CUDA_FILE), dist) for module, dist in CUDA_ENGINES]
  found = [(path, dist) for path, dist in found if path is not None]
  if not found:
    return None, "jax-cuda13-pjrt or jax-cuda12-pjrt"
  jaxlib = version("jaxlib")
  matching = [(path, dist) for path, dist in found if jaxlib is not None and version(dist) == jaxlib]
  return (matching or found)[0]


def nccl_library(env=None, find=package_file) -> str | None:
  """The libnccl.so.2 the NCCL collectives load, or None for the system's."""
  env = os.environ if env is None else env
  explicit = env.get("MYPLUGIN_NCCL_PATH", "").strip()
  if explicit:
    if not os.path.isfile(explicit):
      raise EngineSelectionError(f"MYPLUGIN_NCCL_PATH={explicit}: no such file (it must name libnccl.so.2 itself)")
    return explicit
  for package, name in NCCL_FILES:
    path = find(package, name)
    if path is not None:
      return path
  return None


def cpu_engine(find=package_file, version=distribution_version) -> tuple[str | None, str | None]:
  """(path, release) of the CPU engine: the bundled one, else an installed
  lammps-jax-pjrt-cpu (a build with MYPLUGIN_BUNDLE_ENGINE=OFF)."""
  bundled = find(BUNDLED_PACKAGE, CPU_FILE)
  if bundled is not None:
    release_file = os.path.join(os.path.dirname(bundled), "RELEASE")
    try:
      with open(release_file) as f:
        return bundled, f.read().strip() or None
    except OSError:
      return bundled, None
  installed = find(CPU_PACKAGE, CPU_FILE)
  return installed, _release(CPU_DISTRIBUTION, version) if installed is not None else None


def _release(distribution: str, version) -> str:
  found = version(distribution)
  return f"{distribution} {found}" if found else distribution


def shadow_engine(env=None, find=package_file) -> str | None:
  """The CPU engine that partitions multi-process programs (whatever engine
  runs them): MYPLUGIN_SHADOW_ENGINE_PATH if set, else the CPU engine."""
  env = os.environ if env is None else env
  return env.get("MYPLUGIN_SHADOW_ENGINE_PATH", "").strip() or cpu_engine(find)[0]


def compile_engine(find=package_file, version=distribution_version) -> str | None:
  """XLA's CUDA engine as a compiler for GPUs that this machine need not
  have (compile-only topologies, pip install 'myplugin[gpu-compile]'): the
  same choice as for running, but only when its release equals jaxlib's (a
  compiled program must load where jax and the engine are the same)."""
  path, distribution = find_cuda_engine(find, version)
  jaxlib = version("jaxlib")
  if path is None or jaxlib is None or version(distribution) != jaxlib:
    return None
  return path


def select(env=None, probe=probe_gpus, find=package_file, version=distribution_version) -> Engine:
  env = os.environ if env is None else env
  requested = env.get("MYPLUGIN_ENGINE", "").strip()
  legacy_path = env.get("MYPLUGIN_ENGINE_PATH", "").strip()
  if requested and requested not in ("cpu", "cuda", "auto"):
    return Engine(_kind_of_path(requested, env), requested, "MYPLUGIN_ENGINE names a library")
  if legacy_path and not requested:
    return Engine(_kind_of_path(legacy_path, env), legacy_path, "MYPLUGIN_ENGINE_PATH")
  cpu, cpu_release = cpu_engine(find, version)
  if requested == "cpu":
    return Engine("cpu", cpu, "MYPLUGIN_ENGINE=cpu", cpu_release)
  gpus, why = probe()
  cuda, distribution = find_cuda_engine(find, version)
  if requested == "cuda":
    if gpus == 0:
      raise EngineSelectionError(f"MYPLUGIN_ENGINE=cuda, but no CUDA driver/GPU found: {why}")
    if cuda is None:
      raise EngineSelectionError(f"MYPLUGIN_ENGINE=cuda, but the CUDA engine is not installed: "
                                 f"{CUDA_INSTALL_HINT} (package {distribution})")
    return Engine("cuda", cuda, f"MYPLUGIN_ENGINE=cuda ({why}, {distribution})", _release(distribution, version))
  if gpus > 0 and cuda is not None:
    return Engine("cuda", cuda, f"{why}, {distribution}", _release(distribution, version))
  reason = why if gpus == 0 else f"{why}, but neither jax-cuda13-pjrt nor jax-cuda12-pjrt is installed"
  return Engine("cpu", cpu, f"CPU engine: {reason}", cpu_release)


def _kind_of_path(path: str, env) -> str:
  kind = env.get("MYPLUGIN_ENGINE_KIND", "").strip()
  if kind in ("cpu", "cuda"):
    return kind
  return "cuda" if "cuda" in os.path.basename(path).lower() else "cpu"

"""The NCCL backend compiles against CUDA 12's and CUDA 13's headers alike
(syntax only: a few seconds, no GPU, no libnccl). The test extra installs
both header sets: CUDA 12's from the -cu12 wheels, CUDA 13's from the
unsuffixed 13.x wheels (nvidia/cu13/include)."""
import glob
import importlib
import os
import shutil

import pytest

from proc import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "plugin", "collectives", "nccl_*.cc")))
CUDA_HEADERS = {
    "cuda12": ("nvidia.cuda_runtime", "nvidia.cuda_nvcc", "nvidia.cuda_cccl"),
    "cuda13": ("nvidia.cu13",),
}


def include_dir(module: str) -> str:
  return os.path.join(list(importlib.import_module(module).__path__)[0], "include")


def test_the_nccl_sources_are_found():
  names = {os.path.basename(s) for s in SOURCES}
  assert {"nccl_api.cc", "nccl_communicator.cc", "nccl_ffi_handlers.cc"} <= names, names


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("cuda", sorted(CUDA_HEADERS))
def test_nccl_backend_compiles_against(cuda):
  import jaxlib
  nccl = include_dir("nvidia.nccl")
  cuda_dirs = [include_dir(m) for m in CUDA_HEADERS[cuda]]
  assert os.path.exists(os.path.join(nccl, "nccl.h"))
  assert os.path.exists(os.path.join(cuda_dirs[0], "cuda_runtime.h")), cuda_dirs
  ffi = os.path.join(os.path.dirname(jaxlib.__file__), "include")
  flags = ["-std=c++17", "-fsyntax-only", "-DMYPLUGIN_HAVE_NCCL=1", "-I", os.path.join(ROOT, "plugin")]
  for d in [ffi, nccl, *cuda_dirs]:
    flags += ["-isystem", d]
  for source in SOURCES:
    r = run(["c++", *flags, source], dict(os.environ), timeout=300)
    assert r.returncode == 0, f"{os.path.basename(source)} against {cuda} headers:\n{r.stderr[-4000:]}"
  # The headers really were CUDA 12's or 13's: the runtime says which.
  with open(os.path.join(cuda_dirs[0], "cuda_runtime_api.h")) as f:
    version = int(next(line.split()[2] for line in f if line.startswith("#define CUDART_VERSION")))
  assert version // 1000 == int(cuda[-2:]), version


def test_the_installed_plugin_has_the_nccl_backend():
  # pip install . builds in an isolated environment: NCCL's and CUDA's header
  # wheels are build requirements, so the NCCL handlers are always there.
  from jax_plugin import _myplugin
  targets = _myplugin.nccl_ffi_targets()
  assert targets is not None, "this install was built without the NCCL backend"
  assert "myplugin_all_reduce" in targets


def _configure(tmp_path, *defines):
  import sys
  cmake = shutil.which("cmake")
  assert cmake is not None
  return run([cmake, "-S", ROOT, "-B", str(tmp_path / "build"), f"-DPython_EXECUTABLE={sys.executable}",
              *[f"-D{d}" for d in defines]], dict(os.environ), timeout=300)


def test_a_build_without_nccl_headers_stops_and_says_how_to_turn_it_off(tmp_path):
  out = _configure(tmp_path, "MYPLUGIN_NVIDIA_INCLUDE_DIRS=/nonexistent/nccl;/nonexistent/cuda")
  assert out.returncode != 0
  text = " ".join((out.stdout + out.stderr).split())
  assert "nccl.h and cuda_runtime_api.h not found" in text, text[-2000:]
  assert "MYPLUGIN_NCCL=OFF" in text and "nvidia-nccl-cu12" in text


def test_a_build_told_to_leave_nccl_out_configures_without_it(tmp_path):
  out = _configure(tmp_path, "MYPLUGIN_NCCL=OFF", "MYPLUGIN_NVIDIA_INCLUDE_DIRS=/nonexistent")
  assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
  assert "NCCL backend: off (MYPLUGIN_NCCL=OFF)" in out.stdout

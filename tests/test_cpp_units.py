"""Builds and runs the C++ unit tests (tests/cpp) with CMake."""
import os
import shutil
import sys

import pytest

from proc import run as run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cpp_unit_tests():
  # In the checkout's build folder, beside pip's (build/<wheel tag>), with
  # its build type: a rerun compiles only what changed, and ccache serves
  # the library's objects that pip's build compiled (CMakeLists.txt).
  build = os.path.join(ROOT, "build", "unit-tests")
  generator = ["-G", "Ninja"] if shutil.which("ninja") else []
  configure = run_command(["cmake", "-S", ROOT, "-B", build, *generator, "-DMYPLUGIN_BUILD_TESTS=ON",
                           "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}"],
                          dict(os.environ), timeout=300)
  assert configure.returncode == 0, configure.stdout + configure.stderr
  compile_ = run_command(["cmake", "--build", build, "--target", "myplugin_unit_tests", "-j2"],
                         dict(os.environ), timeout=600)
  assert compile_.returncode == 0, compile_.stdout + compile_.stderr
  run = run_command([os.path.join(build, "myplugin_unit_tests")], dict(os.environ), timeout=120)
  assert run.returncode == 0, run.stdout + run.stderr
  assert " 0 failed" in run.stdout
  # The test extra installs NCCL's headers, so the NCCL backend (built and
  # tested against a fake NCCL, no GPU needed) must have been part of it.
  try:
    import nvidia.nccl  # noqa: F401
    have_nccl_headers = True
  except ImportError:
    have_nccl_headers = False
  if have_nccl_headers:
    assert "NCCL backend tests: ran" in run.stdout, run.stdout

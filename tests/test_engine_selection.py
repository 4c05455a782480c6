"""Which engine myplugin loads: the rules with fakes at the driver and
package boundaries, and on this machine (no GPU) for real."""
import os

import pytest

from jax_plugin import engine_selection as es
from proc import child_env, run_python

CPU, CUDA = "/pkgs/cpu/engine.so", "/pkgs/cuda/xla_cuda_plugin.so"
CUDA12, CUDA13 = "/pkgs/xla_cuda12/xla_cuda_plugin.so", "/pkgs/xla_cuda13/xla_cuda_plugin.so"


def find_both(package, name):
  return {es.CPU_PACKAGE: CPU, "jax_plugins.xla_cuda12": CUDA}.get(package)


def find_all(package, name):
  return {es.CPU_PACKAGE: CPU, "jax_plugins.xla_cuda12": CUDA12, "jax_plugins.xla_cuda13": CUDA13}.get(package)


def versions(**installed):
  return lambda dist: installed.get(dist.replace("-", "_"))


def find_cpu_only(package, name):
  return CPU if package == es.CPU_PACKAGE else None


def no_gpu():
  return 0, "no NVIDIA driver (no /proc/driver/nvidia)"


def two_gpus():
  return 2, "2 NVIDIA GPU(s)"


def test_default_is_cuda_only_with_gpus_and_the_cuda_engine():
  assert es.select({}, probe=two_gpus, find=find_both, version=lambda d: "0.11.2" if "pjrt" in d else None) == \
      es.Engine("cuda", CUDA, "2 NVIDIA GPU(s), jax-cuda12-pjrt", "jax-cuda12-pjrt 0.11.2")
  cpu = es.select({}, probe=no_gpu, find=find_both)
  assert (cpu.kind, cpu.path) == ("cpu", CPU) and "no NVIDIA driver" in cpu.reason
  no_package = es.select({}, probe=two_gpus, find=find_cpu_only)
  assert (no_package.kind, no_package.path) == ("cpu", CPU) and "jax-cuda13-pjrt nor jax-cuda12-pjrt is installed" in no_package.reason


def test_explicit_choices():
  assert es.select({"MYPLUGIN_ENGINE": "cpu"}, probe=two_gpus, find=find_both).path == CPU
  assert es.select({"MYPLUGIN_ENGINE": "cuda"}, probe=two_gpus, find=find_both).path == CUDA
  custom = es.select({"MYPLUGIN_ENGINE": "/opt/my_cuda_engine.so"}, probe=no_gpu, find=find_both)
  assert (custom.kind, custom.path) == ("cuda", "/opt/my_cuda_engine.so")
  legacy = es.select({"MYPLUGIN_ENGINE_PATH": "/opt/engine.so", "MYPLUGIN_ENGINE_KIND": "cpu"}, probe=two_gpus,
                     find=find_both)
  assert (legacy.kind, legacy.path) == ("cpu", "/opt/engine.so")


def test_cuda_that_cannot_run_names_what_is_missing():
  with pytest.raises(es.EngineSelectionError, match="no CUDA driver/GPU found: no NVIDIA driver"):
    es.select({"MYPLUGIN_ENGINE": "cuda"}, probe=no_gpu, find=find_both)
  with pytest.raises(es.EngineSelectionError, match=r"pip install 'myplugin\[cuda13\]'.*'myplugin\[cuda12\]'"):
    es.select({"MYPLUGIN_ENGINE": "cuda"}, probe=two_gpus, find=find_cpu_only)


def test_cuda13_beside_cuda12_the_one_matching_jaxlib_wins():
  only13 = lambda package, name: {"jax_plugins.xla_cuda13": CUDA13}.get(package)  # noqa: E731
  assert es.select({"MYPLUGIN_ENGINE": "cuda"}, probe=two_gpus, find=only13, version=versions()).path == CUDA13
  both = dict(probe=two_gpus, find=find_all)
  on_0112 = es.select({}, version=versions(jaxlib="0.11.2", jax_cuda12_pjrt="0.11.2", jax_cuda13_pjrt="0.10.2"), **both)
  assert on_0112 == es.Engine("cuda", CUDA12, "2 NVIDIA GPU(s), jax-cuda12-pjrt", "jax-cuda12-pjrt 0.11.2")
  on_0120 = es.select({}, version=versions(jaxlib="0.12.0.1", jax_cuda12_pjrt="0.11.2", jax_cuda13_pjrt="0.12.0.1"),
                      **both)
  assert (on_0120.path, on_0120.release) == (CUDA13, "jax-cuda13-pjrt 0.12.0.1")
  on_0102 = es.select({}, version=versions(jaxlib="0.10.2", jax_cuda12_pjrt="0.11.2", jax_cuda13_pjrt="0.10.2"), **both)
  assert (on_0102.path, on_0102.reason) == (CUDA13, "2 NVIDIA GPU(s), jax-cuda13-pjrt")
  # Neither matches (or no metadata): CUDA 13 first.
  assert es.select({}, version=versions(jaxlib="0.11.2"), **both).path == CUDA13


def test_gpu_compile_engine_is_the_cuda_engine_of_jaxlibs_release_only():
  # Compile-only GPU targets need no GPU; the engine's release must equal
  # jaxlib's, as find_cuda_engine prefers, and nothing else is taken.
  assert es.compile_engine(find=find_all, version=versions(jaxlib="0.11.2", jax_cuda12_pjrt="0.11.2")) == CUDA12
  assert es.compile_engine(find=find_all, version=versions(jaxlib="0.12.0.1", jax_cuda13_pjrt="0.12.0.1")) == CUDA13
  assert es.compile_engine(find=find_all, version=versions(jaxlib="0.12.0.1", jax_cuda13_pjrt="0.11.2")) is None
  assert es.compile_engine(find=find_cpu_only, version=versions(jaxlib="0.11.2")) is None


def test_nccl_library_explicit_path_wins_then_the_wheels(tmp_path):
  wheel = "/site/nvidia/nccl/lib/libnccl.so.2"
  from_wheel = lambda package, name: wheel if (package, name) == ("nvidia.nccl", "lib/libnccl.so.2") else None  # noqa: E731
  cu13_dir = lambda package, name: "/site/nvidia/cu13/lib/libnccl.so.2" if package == "nvidia.cu13" else None  # noqa: E731
  assert es.nccl_library({}, find=from_wheel) == wheel
  assert es.nccl_library({}, find=cu13_dir) == "/site/nvidia/cu13/lib/libnccl.so.2"
  assert es.nccl_library({}, find=lambda package, name: None) is None  # the system's libnccl.so.2
  mine = tmp_path / "libnccl.so.2"
  mine.write_bytes(b"")
  assert es.nccl_library({"MYPLUGIN_NCCL_PATH": str(mine)}, find=from_wheel) == str(mine)
  with pytest.raises(es.EngineSelectionError, match=f"MYPLUGIN_NCCL_PATH={tmp_path}/nope.so: no such file"):
    es.nccl_library({"MYPLUGIN_NCCL_PATH": str(tmp_path / "nope.so")}, find=from_wheel)
  with pytest.raises(es.EngineSelectionError, match="MYPLUGIN_NCCL_PATH"):
    es.nccl_library({"MYPLUGIN_NCCL_PATH": str(tmp_path)}, find=from_wheel)  # a folder is not the library


def test_shadow_engine_is_the_users_then_the_installed_cpu_engine():
  assert es.shadow_engine({}, find=find_both) == CPU
  assert es.shadow_engine({"MYPLUGIN_SHADOW_ENGINE_PATH": "/opt/cpu.so"}, find=find_both) == "/opt/cpu.so"
  assert es.shadow_engine({"MYPLUGIN_SHADOW_ENGINE_PATH": " "}, find=lambda p, n: None) is None


def test_gpu_probe_never_initializes_cuda(tmp_path):
  """The probe counts the driver's GPUs and only dlopen()s libcuda."""
  gpus = tmp_path / "gpus"
  assert es.probe_gpus(str(gpus), load=lambda name: None)[0] == 0  # no driver directory
  gpus.mkdir()
  assert es.probe_gpus(str(gpus), load=lambda name: None) == (0, "the NVIDIA driver sees no GPU")
  (gpus / "0000:17:00.0").mkdir()
  (gpus / "0000:65:00.0").mkdir()
  loaded = []
  assert es.probe_gpus(str(gpus), load=loaded.append) == (2, "2 NVIDIA GPU(s)")
  assert loaded == ["libcuda.so.1"]

  def broken(name):
    raise OSError("libcuda.so.1: cannot open shared object file")
  count, why = es.probe_gpus(str(gpus), load=broken)
  assert count == 0 and "does not load" in why


def test_this_machine_picks_the_cpu_engine_and_refuses_cuda():
  r = run_python(["-c", "import jax; print(jax.devices()[0].platform, jax.devices()[0].device_kind)"],
                 child_env(JAX_PLATFORMS="myplugin"), timeout=120)
  assert r.returncode == 0 and r.stdout.startswith("myplugin"), r.output
  r = run_python(["-c", "import jax; jax.devices()"], child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_ENGINE="cuda"),
                 timeout=120)
  assert r.returncode != 0
  assert "MYPLUGIN_ENGINE=cuda, but no CUDA driver/GPU found" in r.output, r.output


def test_the_bundled_cpu_engine_wins_over_an_installed_one(tmp_path):
  bundled = tmp_path / es.CPU_FILE
  bundled.write_bytes(b"")
  (tmp_path / "RELEASE").write_text("lammps-jax-pjrt-cpu 0.11.2\n")
  both = lambda package, name: {es.BUNDLED_PACKAGE: str(bundled), es.CPU_PACKAGE: CPU}.get(package)
  engine = es.select({"MYPLUGIN_ENGINE": "cpu"}, probe=no_gpu, find=both)
  assert (engine.path, engine.release) == (str(bundled), "lammps-jax-pjrt-cpu 0.11.2")
  # A build without the bundled engine (MYPLUGIN_BUNDLE_ENGINE=OFF) falls back to the installed package.
  engine = es.select({}, probe=no_gpu, find=find_both, version=lambda d: "0.11.2")
  assert (engine.path, engine.release) == (CPU, "lammps-jax-pjrt-cpu 0.11.2")
  assert es.shadow_engine({}, find=both) == str(bundled)


def test_the_installed_wheel_ships_the_engine_with_its_license():
  path, release = es.cpu_engine()
  assert path is not None and path.endswith(os.path.join("jax_plugin", "engine", es.CPU_FILE)), path
  assert release == "lammps-jax-pjrt-cpu 0.11.2"
  folder = os.path.dirname(path)
  assert "Apache License" in open(os.path.join(folder, "LICENSE")).read()
  assert os.path.getsize(os.path.join(folder, "THIRD_PARTY_NOTICES")) > 0
  # The engine is not a run-time dependency: its metadata would cap jax.
  from importlib import metadata
  assert not any(r.lower().startswith("lammps") for r in metadata.requires("myplugin") or [])


def test_gpu_topology_without_the_cuda_engine_says_what_to_install():
  # As where jax-cuda13-pjrt (of jaxlib's release) is not installed: the
  # choice the PJRT library reads names no compile engine.
  program = """
import jax
from jax.experimental import topologies
from jax_plugin import _myplugin
jax.devices()
c = _myplugin.library_choice()
_myplugin.set_library_choice(c["engine_path"], c["engine_kind"], c["shadow_engine_path"], c["nccl_library"],
                             compile_engine_path="")
try:
  topologies.get_topology_desc(platform="myplugin", topology="1x1x8", gpu="h100")
except Exception as e:
  print("ERROR", e)
"""
  r = run_python(["-c", program], child_env(JAX_PLATFORMS="myplugin"), timeout=120)
  assert r.returncode == 0, r.output
  assert ("ERROR FAILED_PRECONDITION: compiling for NVIDIA GPUs needs XLA's CUDA engine of the installed jaxlib's "
          "release and the CUDA compiler pieces it runs (ptxas, libdevice): pip install 'myplugin[gpu-compile]'"
          ) in r.stdout, r.output

"""Compiling for NVIDIA GPUs without one (pjrt/gpu_compile.h): compile-only
topologies of myplugin over XLA's CUDA engine, on this machine (no GPU).

Needs the gpu-compile extra (jax-cuda13-pjrt of jaxlib's release, ptxas,
libdevice). Without it these tests are skipped with that reason, except
where MYPLUGIN_REQUIRE_GPU_COMPILE=1 (ci/gpu_compile_matrix.sh sets it):
there a missing piece is a failure.

The collectives of each compiled program are checked against those that
XLA's SPMD partitioner inserts for the same program on jax's CPU backend
(tests/programs/gpu_compile_programs.py, an independent compile).
"""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from proc import child_env, run, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs", "gpu_compile_programs.py")
GPUS = ("a100", "l4", "h100", "b200")


def _missing() -> str | None:
  from jax_plugin import engine_selection
  if engine_selection.compile_engine() is None:
    return "XLA's CUDA engine of jaxlib's release is not installed (pip install 'myplugin[gpu-compile]')"
  # Where XLA looks first (site-packages/nvidia/cu13), from nvidia-cuda-nvcc and nvidia-nvvm.
  for name in ("bin/ptxas", "nvvm/libdevice/libdevice.10.bc"):
    if engine_selection.package_file("nvidia.cu13", name) is None:
      return f"nvidia/cu13/{name} is not installed (pip install 'myplugin[gpu-compile]')"
  return None


_WHY = _missing()
if _WHY is not None and os.environ.get("MYPLUGIN_REQUIRE_GPU_COMPILE") == "1":
  raise RuntimeError(f"MYPLUGIN_REQUIRE_GPU_COMPILE=1, but {_WHY}")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def env(**extra) -> dict:
  return child_env(JAX_PLATFORMS="myplugin", **extra)


def _script(tmp_path, body: str) -> str:
  path = tmp_path / "prog.py"
  path.write_text(body)
  return str(path)


def _compile(tmp_path, side: str, *args: str, timeout: float = 400) -> dict:
  out = tmp_path / f"{side}.json"
  e = env() if side == "myplugin" else child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8")
  r = run_python([PROGRAMS, side, *args, "--out", str(out)], e, timeout=timeout)
  assert r.returncode == 0, r.output[-4000:]
  return json.loads(out.read_text())


def _watching_dlopen(tmp_path) -> dict:
  """The environment, with the dynamic loader logging every library it
  looks for: a CUDA client would look for the driver, libcuda.so.1 (absent
  here, so its load would fail, not show in /proc/self/maps)."""
  return env(LD_DEBUG="files", LD_DEBUG_OUTPUT=str(tmp_path / "ld"))


def _driver_opened(tmp_path) -> list[str]:
  """The driver lookups, except cuBLASLt's: jax's own CUDA plugin preloads
  cuBLAS at plugin discovery where it is installed (the gpu-compile-cudnn
  extra brings it, as cuDNN's dependency), and cuBLASLt looks for the
  driver as it loads; with jax's plugin kept out, nothing does."""
  logs = [p.read_text(errors="replace") for p in tmp_path.glob("ld.*")]
  assert logs, "the dynamic loader wrote no log"
  return [line for log in logs for line in log.splitlines()
          if re.search(r"libcuda\.so|libnvidia-ml", line) and "libcublasLt.so" not in line]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
  """XLA's own partition of every program on jax's CPU backend, 4 devices."""
  return _compile(tmp_path_factory.mktemp("ref"), "reference", "--devices", "4")


@pytest.mark.parametrize("gpu", GPUS)
def test_programs_over_two_hosts_carry_the_partitioners_collectives(tmp_path, reference, gpu):
  ours = _compile(tmp_path, "myplugin", "--gpu", gpu, "--topology", "1x2x2",
                  "--programs", "psum,ppermute,all_to_all,grid_psum_a,train_step,model_parallel,numerics")
  for name, got in ours.items():
    assert got["collectives"] == reference[name]["collectives"], name
    # Our NCCL calls stand in for XLA's collectives, none of which is left.
    assert got["xla_collectives"] == [], name
    assert got["argument_bytes"] > 0, name  # memory_analysis
    assert "flops" in got, name  # cost_analysis
  assert len(ours["train_step"]["collectives"]) == 5  # one all-reduce per gradient and the loss


def test_topology_devices_and_a_single_host_program(tmp_path):
  body = """
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(platform="myplugin", topology="1x2x4", gpu="h100")
print("DEVICES", [(d.id, d.process_index, d.device_kind, d.platform) for d in topo.devices])
local = jax.sharding.Mesh(np.array(topo.devices[:4]), ("x",))  # the first host's four GPUs
x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(local, P("x")))
c = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=local, in_specs=P("x"), out_specs=P("x"))).lower(x).compile()
text = c.as_text()
print("ALLREDUCE", "all-reduce" in text, "OURS", "myplugin_all_reduce" in text)
print("MEMORY", c.memory_analysis().argument_size_in_bytes)
"""
  r = run_python([_script(tmp_path, body)], _watching_dlopen(tmp_path), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  devices = eval(r.stdout.split("DEVICES ", 1)[1].splitlines()[0])
  assert [(d, p) for d, p, _, _ in devices] == [(i, i // 4) for i in range(8)]
  assert {k for _, _, k, _ in devices} == {"NVIDIA H100 80GB HBM3"}
  assert {p for _, _, _, p in devices} == {"myplugin"}
  # One host's program keeps XLA's own collectives (the engine's NCCL), as at run time.
  assert "ALLREDUCE True OURS False" in r.stdout
  assert "MEMORY 128" in r.stdout  # per device: a 2x16 f32 block of the 8x16 argument
  assert _driver_opened(tmp_path) == []


def test_target_config_as_jax_cuda_plugin_takes_it(tmp_path):
  # A GPU not in our table, described in GpuTargetConfigProto text.
  config = """gpu_device_info { threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
 shared_memory_per_core: 102400 threads_per_core_limit: 1536 core_count: 84 fpus_per_core: 128
 block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535 memory_bandwidth: 936000000000
 l2_cache_size: 6291456 clock_rate_ghz: 1.74 device_memory_size: 25769803776 shared_memory_per_block_optin: 101376
 cuda_compute_capability { major: 8 minor: 6 } registers_per_core_limit: 65536 registers_per_block_limit: 65536 }
platform_name: "CUDA" device_description_str: "NVIDIA GeForce RTX 3090" runtime_version { major: 13 }"""
  body = f"""
import jax, jax.numpy as jnp
from jax.experimental import topologies
topo = topologies.get_topology_desc(platform="myplugin", topology="1x1x1", target_config={config!r})
d = topo.devices[0]
x = jax.ShapeDtypeStruct((256,), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(d))
text = jax.jit(lambda v: jnp.sin(v) * 2).lower(x).compile().as_text()
print("KIND", d.device_kind, "SINE", "sine" in text or "sin" in text)
"""
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "KIND NVIDIA GeForce RTX 3090 SINE True" in r.stdout


def test_bad_requests_are_clear_errors(tmp_path):
  body = """
from jax.experimental import topologies
for kw in (dict(topology="1x2x4", gpu="v100"), dict(topology="2x4", gpu="h100"), dict(topology="1x1x8"),
           dict(topology="1x1x8", gpu="h100", target_config="x"), dict(topology="1x1x8", gpu="h100", chips="8"),
           dict(topology="1x1x8", target_config='device_description_str: "X"')):
  try:
    topologies.get_topology_desc(platform="myplugin", **kw)
    print("ACCEPTED", kw)
  except Exception as e:
    print("ERROR", str(e).splitlines()[0])
"""
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "ACCEPTED" not in r.stdout
  for text in ("no GPU called 'v100' (known: a100, l4, h100, h200, b200)", "<slices>x<hosts>x<GPUs per host>",
               "no GPU given", "both gpu and target_config given", "unknown option 'chips'",
               "no cuda_compute_capability"):
    assert text in r.stdout, (text, r.stdout)


def test_serialized_artifact_loads_nowhere_here_and_never_opens_cuda(tmp_path):
  out = tmp_path / "blobs"
  out.mkdir()
  _compile(tmp_path, "myplugin", "--gpu", "l4", "--topology", "1x2x2", "--programs", "psum,numerics",
           "--serialize-dir", str(out))
  body = f"""
import jax
from jax.experimental.serialize_executable import deserialize_and_load
for name in ("psum", "numerics"):
  blob = open({str(out)!r} + "/" + name + ".bin", "rb").read()
  try:
    deserialize_and_load(blob, jax.tree.structure(((0,), {{}})), jax.tree.structure(0), backend="myplugin")
    print("LOADED", name)
  except Exception as e:
    print("REFUSED", name, str(e).splitlines()[0])
"""
  r = run_python([_script(tmp_path, body)], _watching_dlopen(tmp_path), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "LOADED" not in r.stdout
  for name in ("psum", "numerics"):
    assert (f"REFUSED {name} FAILED_PRECONDITION: this executable was compiled ahead of time for NVIDIA L4 (sm_89) "
            "GPUs in topology 1x2x2; this process runs myplugin over XLA's CPU engine") in r.stdout, r.stdout
  # The refusal comes before any engine call: nothing asked for the CUDA
  # driver. (The CUDA engine's .so itself is loaded: jax's plugin discovery
  # dlopen()s every installed jax_plugins package.)
  assert _driver_opened(tmp_path) == []


def _hide_cuda_toolkit_command(argv: list[str], empty: str) -> list[str] | None:
  """argv in a private mount namespace where the CUDA toolkit folders are
  empty; None where that cannot be made (not root, no unshare)."""
  if os.geteuid() != 0 or shutil.which("unshare") is None:
    return None
  folders = [p for p in ("/usr/local/cuda-13.0", "/usr/local/cuda") if os.path.isdir(p)]
  mounts = " && ".join(f"mount --bind {empty} {p}" for p in folders) or "true"
  quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
  return ["unshare", "-m", "sh", "-c", f"{mounts} && ls -A /usr/local/cuda-13.0 2>/dev/null | wc -l && exec {quoted}"]


def test_compiles_with_the_cuda_toolkit_hidden(tmp_path):
  import sys
  empty = tmp_path / "empty"
  empty.mkdir()
  out = tmp_path / "hidden.json"
  argv = _hide_cuda_toolkit_command([sys.executable, PROGRAMS, "myplugin", "--gpu", "h100", "--topology", "1x2x2",
                                     "--programs", "numerics,train_step,pallas", "--out", str(out)], str(empty))
  if argv is None:
    pytest.skip("hiding /usr/local/cuda needs root and unshare")
  r = run(argv, env(), timeout=400)
  assert r.returncode == 0, r.output[-3000:]
  assert r.stdout.splitlines()[0].strip() == "0"  # the toolkit's folder was empty for the compile
  got = json.loads(out.read_text())
  assert set(got) == {"numerics", "train_step", "pallas"} and len(got["train_step"]["collectives"]) == 5


def test_programs_for_gpus_are_lowered_as_jax_lowers_for_cuda(tmp_path):
  # On this machine myplugin runs the CPU engine, whose lowering rules serve
  # its devices; a program for a GPU topology gets "cuda"'s (cumsum has one
  # of its own: reduce_window on the CPU, not on CUDA). The reference is
  # jax's own lowering for platform cuda.
  body = """
import collections, re, jax, jax.numpy as jnp
from jax.experimental import topologies
topo = topologies.get_topology_desc(platform="myplugin", topology="1x1x1", gpu="a100")
f = jax.jit(lambda a: (jnp.cumsum(a, axis=0), jnp.sin(a) @ a))
shape = jax.ShapeDtypeStruct((64, 64), jnp.float32)
on_gpu = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(topo.devices[0]))
ops = lambda t: collections.Counter(o for o in re.findall(r"stablehlo\\.\\w+", t) if o != "stablehlo.mesh")
ours, here = ops(f.lower(on_gpu).as_text()), ops(f.lower(shape).as_text())
cuda, cpu = (ops(f.trace(shape).lower(lowering_platforms=(p,)).as_text()) for p in ("cuda", "cpu"))
print("GPU TARGET AS CUDA", ours == cuda, "HERE AS CPU", here == cpu, "DIFFERENT", cuda != cpu)
"""
  r = run_python([_script(tmp_path, body)], child_env(JAX_PLATFORMS="myplugin,cpu"), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "GPU TARGET AS CUDA True HERE AS CPU True DIFFERENT True" in r.stdout, r.output[-2000:]


# jax's own CUDA plugin, when installed, registers its custom-call targets
# and partitioning rules in the same engine library that myplugin compiles
# with: kept out here, whatever reaches the engine came through myplugin.
_WITHOUT_JAX_CUDA = """
import jax_plugins.xla_cuda13 as jax_cuda_plugin
jax_cuda_plugin.initialize = lambda: None
"""


def _catalogue_run(programs: str, topology: str, names: str) -> str:
  return f"""
import sys, re
sys.path.insert(0, {os.path.dirname(PROGRAMS)!r})
import gpu_compile_programs as programs
from jax.experimental import topologies
topo = topologies.get_topology_desc(platform="myplugin", topology={topology!r}, gpu="h100")
for name, (fn, args) in programs.catalogue(topo.devices).items():
  if name not in {names.split(",")!r}:
    continue
  try:
    text = fn.lower(*args).compile().as_text()
  except Exception as e:
    print("FAILED", name, str(e).splitlines()[0][:400])
    continue
  print("COMPILED", name, "SHAPES", sorted(set(re.findall(r"f32\\[\\d+,128\\]", text))),
        "ALLREDUCE", "all-reduce" in text, "OURS", "myplugin_all_reduce" in text,
        "TRITON", 'custom_call_target="__gpu$xla.gpu.triton"' in text,
        "RULES_LEFT", "CustomSPMDPartitioning" in text)
"""


def test_custom_partitioning_rules_reach_the_cuda_engine_through_myplugin(tmp_path):
  # One host's GPUs: the CUDA engine partitions the program itself, with
  # jax's rules, which only myplugin's custom-partitioner extension handed
  # it (before: NOT_FOUND: No registered implementation for custom call to
  # CustomSPMDPartitioning for platform CUDA). Each of the 4 GPUs gets an
  # 8-row shard; the sum's all-reduce is XLA's own (one host).
  body = _WITHOUT_JAX_CUDA + _catalogue_run(PROGRAMS, "1x1x4", "custom_partitioning")
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert ("COMPILED custom_partitioning SHAPES ['f32[8,128]'] ALLREDUCE True OURS False TRITON False "
          "RULES_LEFT False") in r.stdout, r.output[-3000:]


def test_pallas_and_custom_partitioning_over_two_hosts(tmp_path, reference):
  # A Triton kernel in a shard_map and a custom_partitioning op, for 2
  # processes x 2 H100s: the collectives are the partitioner's, the kernel
  # (its Triton IR) a custom call of each process's compiled program, which
  # XLA's CUDA engine compiled to machine code.
  ours = _compile(tmp_path, "myplugin", "--gpu", "h100", "--topology", "1x2x2", "--programs",
                  "custom_partitioning,pallas")
  for name in ("custom_partitioning", "pallas"):
    assert ours[name]["collectives"] == reference[name]["collectives"], name
    assert ours[name]["xla_collectives"] == [], name
  body = _catalogue_run(PROGRAMS, "1x2x2", "pallas")
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "COMPILED pallas SHAPES ['f32[8,128]'] ALLREDUCE False OURS True TRITON True" in r.stdout, r.output[-3000:]


def test_pallas_kernel_for_a_gpu_is_lowered_as_jax_lowers_it_for_cuda(tmp_path):
  # Compiled mode: the kernel's Triton IR goes into the program as jax's
  # cuda lowering puts it (custom call __gpu$xla.gpu.triton), and XLA's CUDA
  # engine compiles it for sm_90 with no GPU (Triton to PTX to machine code
  # as it emits the call). The reference is jax's own lowering for platform
  # cuda under the same abstract H100.
  body = r"""
import re, jax, jax.numpy as jnp
from jax.experimental import pallas as pl, topologies
topo = topologies.get_topology_desc(platform="myplugin", topology="1x1x1", gpu="h100")
def kernel(x_ref, o_ref):
  o_ref[...] = x_ref[...] * 2.0 + jnp.sin(x_ref[...])
f = jax.jit(lambda v: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype))(v))
mesh = jax.sharding.Mesh(topo.devices, ("x",))
x = jax.ShapeDtypeStruct((16, 128), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
calls = lambda t: re.findall(r"stablehlo\.custom_call @([\w$.]+)", t)
with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
  ours = f.lower(x)
  cuda = f.trace(jax.ShapeDtypeStruct((16, 128), jnp.float32)).lower(lowering_platforms=("cuda",))
  print("CALLS", calls(ours.as_text()), "SAME AS CUDA", calls(ours.as_text()) == calls(cuda.as_text()))
  text = ours.compile().as_text()
print("TRITON CALL", 'custom_call_target="__gpu$xla.gpu.triton"' in text)
try:
  jax.jit(lambda v: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype))(v)).lower(
      jnp.zeros((16, 128), jnp.float32)).compile()
except Exception as e:
  print("ON THIS CPU", str(e).splitlines()[0])
"""
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "CALLS ['__gpu$xla.gpu.triton'] SAME AS CUDA True" in r.stdout, r.output[-3000:]
  assert "TRITON CALL True" in r.stdout, r.output[-3000:]
  # On the machine's own (CPU engine) devices: jax's CPU backend's error.
  assert "ON THIS CPU Only interpret mode is supported on CPU backend" in r.stdout, r.output[-3000:]


def _cudnn_missing() -> str | None:
  from jax_plugin import engine_selection
  if engine_selection.package_file("nvidia.cudnn", "lib/libcudnn.so.9") is None:
    return "cuDNN is not installed (pip install 'myplugin[gpu-compile-cudnn]')"
  return None


@pytest.mark.skipif(_cudnn_missing() is not None and os.environ.get("MYPLUGIN_REQUIRE_GPU_COMPILE") != "1",
                    reason=_cudnn_missing() or "")
@pytest.mark.parametrize("topology", ["1x1x4", "1x2x2"])
def test_cudnn_attention_over_a_mesh(tmp_path, topology):
  # jax.nn.dot_product_attention(implementation="cudnn") is a
  # custom_partitioning op; over a batch-sharded mesh each GPU's program
  # holds one cuDNN flash-attention call on its shard and no collective.
  # On one host the CUDA engine partitions it (jax's rule through myplugin's
  # extension, jax's own CUDA plugin kept out); over two, jaxlib's XLA does
  # and each process's part is compiled for the GPUs. jax asks cuDNN's
  # version when it lowers (so cuDNN must be installed); cuDNN builds its
  # graph when the program first runs on a GPU.
  assert _cudnn_missing() is None, _cudnn_missing()
  body = _WITHOUT_JAX_CUDA + f"""
import re, jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(platform="myplugin", topology={topology!r}, gpu="h100")
n = len(topo.devices)
mesh = topologies.make_mesh(topo, (n,), ("x",))
x = jax.ShapeDtypeStruct((2 * n, 256, 4, 64), jnp.bfloat16, sharding=NamedSharding(mesh, P("x")))
f = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn"),
            out_shardings=NamedSharding(mesh, P("x")))
text = f.lower(x, x, x).compile().as_text()
calls = re.findall(r'= \\((bf16\\[[\\d,]+\\])[^)]*\\) custom-call\\([^)]*\\), custom_call_target="(__cudnn\\$fmha\\w+)"', text)
print("CALLS", calls, "COLLECTIVES", [k for k in ("all-reduce", "all-gather", "all-to-all", "myplugin_") if k in text])
"""
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  assert "CALLS [('bf16[2,4,256,64]', '__cudnn$fmhaSoftmax')] COLLECTIVES []" in r.stdout, r.output[-3000:]


def test_mosaic_gpu_kernel_compiles_for_a_gpu(tmp_path):
  # jax 0.12's Mosaic GPU kernels (plgpu.kernel, an mpmd_map whose rule
  # reads the module's platform) lower as for cuda and compile for sm_90:
  # the kernel is a mosaic_gpu_v2 call, compiled by its handler
  # (jax-cuda13-plugin's) when the program first runs on a GPU.
  body = """
import jax, jax.numpy as jnp
from jax.experimental import topologies
try:
  from jax.experimental.pallas import mosaic_gpu as plgpu
  plgpu.kernel
except (ImportError, AttributeError) as e:
  print("NO MOSAIC GPU", e)
  raise SystemExit(0)
topo = topologies.get_topology_desc(platform="myplugin", topology="1x1x1", gpu="h100")
def body(x_ref, o_ref):
  o_ref[...] = x_ref[...] * 2.0 + 1.0
f = jax.jit(lambda v: plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(v.shape, v.dtype))(v))
x = jax.ShapeDtypeStruct((128, 128), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(topo.devices[0]))
text = f.lower(x).compile().as_text()
print("MOSAIC CALL", 'custom_call_target="mosaic_gpu_v2"' in text)
"""
  r = run_python([_script(tmp_path, body)], env(), timeout=300)
  assert r.returncode == 0, r.output[-3000:]
  import jax
  if jax.__version_info__ < (0, 12):
    return  # jax 0.11 and older: Mosaic GPU through pallas_call, not plgpu.kernel
  assert "MOSAIC CALL True" in r.stdout, r.output[-3000:]


def test_moe_ragged_all_to_all_over_two_hosts(tmp_path):
  # lax.ragged_all_to_all across processes: an expert-parallel MoE layer
  # (bench/moe_layer.py: tokens dispatched to their experts and returned)
  # for 2 hosts x 4 H100s. myplugin's program runs both ragged exchanges as
  # our NCCL calls on the collective stream, each after the all-to-all of
  # its senders' (offset, size) pairs; none of XLA's is left (it would run
  # among one process's GPUs only). jax's own CUDA backend, given the same
  # target, has the same two ragged exchanges of the same data.
  bench = os.path.join(HERE, "..", "bench")
  body = f"""
import sys, re
sys.path.insert(0, {bench!r})
import gpu_schedule
from jax.experimental import topologies
topo = topologies.get_topology_desc(platform="myplugin", topology="1x2x4", gpu="h100")
fn, args = gpu_schedule._programs(topo.devices, ["moe"])["moe"]
text = fn.lower(*args).compile().as_text()
print("XLA RAGGED", len(re.findall(r"ragged-all-to-all(?:-start)?\\(", text)),
      "OURS", text.count('custom_call_target="myplugin_ragged_all_to_all"'),
      "EXCHANGES", len(re.findall(r"s32\\[8,2\\]\\{{1,0\\}} custom-call\\([^)]*\\), custom_call_target=\\"myplugin_all_to_all\\"", text)))
"""
  r = run_python([_script(tmp_path, body)], env(JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1"), timeout=400)
  assert r.returncode == 0, r.output[-3000:]
  assert "XLA RAGGED 0 OURS 2 EXCHANGES 2" in r.stdout, r.output[-3000:]
  import sys
  sys.path.insert(0, bench)
  import gpu_schedule
  # Each side in its own process group, killed whole past its deadline (run_side).
  ours = gpu_schedule.run_side("myplugin", "h100", "1x2x4", ["moe"], timeout=300)["moe"]
  theirs = gpu_schedule.run_side("cuda", "h100", "1x2x4", ["moe"], timeout=300)["moe"]
  assert ours["kinds"]["ragged-all-to-all"] == theirs["kinds"]["ragged-all-to-all"] == 2, (ours, theirs)
  assert ours["kinds"]["all-to-all"] == theirs["kinds"]["all-to-all"] + 2, (ours, theirs)
  assert ours["async_pairs"] >= 4 + 2, ours  # the user's two all-to-alls and ours, the two ragged calls
  # The pairs' exchanges add 2 x 7/8 x 64 bytes to the same data.
  assert ours["ring_bytes"] == pytest.approx(theirs["ring_bytes"] + 2 * 7 / 8 * 64), (ours, theirs)

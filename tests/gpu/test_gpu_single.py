"""myplugin over XLA's CUDA engine on one GPU, against numpy and against
jax's own CUDA backend (JAX_PLATFORMS=cuda) on the same machine: device
names, numerics, the seed programs that fit one device, the NCCL handlers
in a device group of one rank, myplugin-run -n 1, donation, 1 GB transfers and a
1000-step soak with GPU memory measured before and after."""
import json
import os
import sys

import numpy as np

from proc import child_env, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numerics  # noqa: E402

NUMERICS = os.path.join(HERE, "numerics.py")


def on_myplugin(args, timeout=300, **env):
  r = run_python(args, child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_ENGINE="cuda", **env), timeout=timeout)
  assert r.returncode == 0, r.output
  return r


def on_jax_cuda(args, timeout=300):
  r = run_python(args, child_env(JAX_PLATFORMS="cuda"), timeout=timeout)
  assert r.returncode == 0, r.output
  return r


def last_json(r):
  return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_gpu_is_a_myplugin_device_with_its_real_name():
  code = "import jax, json; d = jax.devices()[0]; print(json.dumps([d.platform, d.device_kind, len(jax.devices())]))"
  ours, theirs = last_json(on_myplugin(["-c", code])), last_json(on_jax_cuda(["-c", code]))
  assert ours[0] == "myplugin" and theirs[0] == "gpu"
  assert ours[1] == theirs[1], (ours, theirs)  # e.g. "NVIDIA H100 80GB HBM3"
  assert ours[2] == theirs[2]


def test_numerics_match_numpy_and_jax_cuda(tmp_path):
  on_myplugin([NUMERICS, str(tmp_path / "ours.npz")])
  on_jax_cuda([NUMERICS, str(tmp_path / "theirs.npz")])
  ours, theirs = np.load(tmp_path / "ours.npz"), np.load(tmp_path / "theirs.npz")
  assert str(ours["platform"]) == "myplugin" and str(theirs["platform"]) == "gpu"
  assert numerics.check_against_numpy(ours) == []
  assert numerics.check_against_numpy(theirs) == []  # the reference itself is sound
  assert numerics.check_against_each_other(ours, theirs) == []


SEEDS_ON_ONE_DEVICE = """
import sys, numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
try:
  from jax import shard_map
  smap = lambda f, mesh, i, o: shard_map(f, mesh=mesh, in_specs=i, out_specs=o)
except ImportError:
  from jax.experimental.shard_map import shard_map as smap
mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
x = jnp.arange(32.0).reshape(8, 4)
sharded = jax.device_put(x, NamedSharding(mesh, P("x")))
r = {}
r["sharded_jit"] = jax.jit(lambda a: jnp.sin(a) @ a.T)(sharded)
r["constraint"] = jax.jit(lambda a: jax.lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P(None, "x"))))(sharded)
r["shard_map_psum"] = jax.jit(smap(lambda a: jax.lax.psum(a, "x"), mesh, P("x"), P()))(sharded)
r["pmap_psum"] = jax.pmap(lambda a: jax.lax.psum(a, "i"), axis_name="i")(jnp.ones((1, 3)))
np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in r.items()})
"""


def test_seed_programs_on_one_device_match_cpu(tmp_path):
  program = tmp_path / "seeds.py"
  program.write_text(SEEDS_ON_ONE_DEVICE)
  ref = run_python([str(program), str(tmp_path / "cpu.npz")], child_env(JAX_PLATFORMS="cpu"), timeout=120)
  assert ref.returncode == 0, ref.output
  on_myplugin([str(program), str(tmp_path / "gpu.npz")])
  want, got = np.load(tmp_path / "cpu.npz"), np.load(tmp_path / "gpu.npz")
  for key in want.files:
    np.testing.assert_allclose(got[key], want[key], rtol=2e-3, err_msg=key)


NCCL_DEVICE_GROUP_OF_ONE = """
import json, numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
try:
  from jax import shard_map
  smap = lambda f: shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
except ImportError:
  from jax.experimental.shard_map import shard_map as _sm
  smap = lambda f: _sm(f, mesh, P("x"), P("x"))
mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
one = np.zeros(1, np.int64)
x = jnp.arange(64, dtype=jnp.float32) - 20.0
def ffi(name, v, shape=None, **attrs):
  return jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(shape or v.shape, v.dtype))(v, **attrs)
out = {
  "all_reduce": jax.jit(smap(lambda v: ffi("myplugin_all_reduce", v, reduction="sum", replica_groups=one,
                                           group_size=np.int64(1), function="jit_gpu_test")))(x),
  "all_gather": jax.jit(smap(lambda v: ffi("myplugin_all_gather", v, replica_groups=one, group_size=np.int64(1),
                                           function="jit_gpu_test")))(x),
  "psum": jax.jit(smap(lambda v: jax.lax.psum(v, "x")))(x),
}
print(json.dumps({k: np.asarray(v).tolist() for k, v in out.items()}))
"""


def test_nccl_handlers_in_a_compiled_program_device_group_of_one():
  got = last_json(on_myplugin(["-c", NCCL_DEVICE_GROUP_OF_ONE]))
  want = (np.arange(64, dtype=np.float32) - 20.0).tolist()
  assert got == {"all_reduce": want, "all_gather": want, "psum": want}


def test_myplugin_run_one_process_on_the_gpu():
  code = ("import jax, json, jax.numpy as jnp; d = jax.devices()[0]; "
          "print('RESULT', json.dumps([jax.process_count(), d.platform, d.device_kind, "
          "float(jax.jit(jnp.sum)(jnp.arange(10.0)))]))")
  r = on_myplugin(["-m", "jax_plugin.launcher", "-n", "1", "--timeout", "240", "--", sys.executable, "-c", code])
  line = next(line for line in r.stdout.splitlines() if "RESULT " in line)  # the launcher prefixes each line
  got = json.loads(line.split("RESULT ", 1)[1])
  assert got[0] == 1 and got[1] == "myplugin" and "cpu" not in got[2].lower() and got[3] == 45.0, r.output


def test_donation_reuses_the_buffer():
  code = ("import jax, json, jax.numpy as jnp; x = jnp.arange(1 << 20, dtype=jnp.float32); "
          "f = jax.jit(lambda a: a * 2 + 1, donate_argnums=0); y = f(x); "
          "print(json.dumps([x.is_deleted(), float(y[7]), float(y.sum())]))")
  deleted, y7, total = last_json(on_myplugin(["-c", code]))
  n = 1 << 20
  assert deleted is True and y7 == 15.0 and total == float(2 * (n * (n - 1) // 2) + n)


def test_one_gigabyte_round_trip():
  code = ("import jax, json, time, numpy as np; a = np.random.default_rng(0).integers(0, 255, 1 << 30, np.uint8); "
          "t = time.perf_counter(); d = jax.device_put(a); d.block_until_ready(); up = time.perf_counter() - t; "
          "t = time.perf_counter(); b = np.asarray(d); down = time.perf_counter() - t; "
          "print(json.dumps([bool(np.array_equal(a, b)), d.devices().pop().platform, up, down]))")
  equal, platform, up, down = last_json(on_myplugin(["-c", code], timeout=400))
  print(f"1 GiB host->device {1 / up:.1f} GiB/s, device->host {1 / down:.1f} GiB/s")
  assert equal and platform == "myplugin"


SOAK = """
import gc, json, jax, jax.numpy as jnp, numpy as np
d = jax.devices()[0]
step = jax.jit(lambda w, x: w - 0.01 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w))
w = jax.device_put(np.eye(512, dtype=np.float32), d)
x = jax.device_put(np.ones((256, 512), np.float32), d)
w = step(w, x).block_until_ready()  # compiled, first allocations made
gc.collect()
before = d.memory_stats() or {}
for _ in range(1000):
  w = step(w, x)
w.block_until_ready()
gc.collect()
after = d.memory_stats() or {}
print(json.dumps([before.get("bytes_in_use"), after.get("bytes_in_use"), bool(np.isfinite(np.asarray(w)).all())]))
"""


def test_soak_of_1000_steps_does_not_grow_gpu_memory():
  before, after, finite = last_json(on_myplugin(["-c", SOAK], timeout=400))
  print(f"GPU bytes in use: {before} before, {after} after 1000 steps")
  assert before is not None and after is not None, "memory_stats() has no bytes_in_use"
  assert finite
  assert after <= before + (1 << 20), (before, after)  # 1 MiB of slack for allocator rounding

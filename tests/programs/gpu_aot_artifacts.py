"""Executables compiled here, with no GPU, for one NVIDIA GPU, then loaded
and run on a machine that has one (the GPU kit carries them there).

  python gpu_aot_artifacts.py build DIR --gpus h100,h200 [--topologies 1x1x1,1x2x1,1x4x1]
                                                            # CPU-only machine, myplugin[gpu-compile]
  python gpu_aot_artifacts.py check DIR                     # GPU machine, MYPLUGIN_ENGINE=cuda
  myplugin-run -n 2 --share-gpu -- python gpu_aot_artifacts.py check DIR   # the 1x2x1 ones

`build` compiles each program for each topology of each named GPU through
jax.experimental.topologies (XLA's CUDA engine, no client), serializes it,
and stores it with its inputs and the outputs of the same program on jax's
CPU backend (a child with JAX_PLATFORMS=cpu and as many devices as the
topology), one pickle per program, GPU and topology. On 1x1x1 the
programs of one GPU; on 1xNx1 (N processes of one GPU each, as N
processes sharing one GPU are) the multi-process ones: every collective
in a shard_map and a data-parallel training step, over a mesh of the N
devices.

`check` loads each artifact of this job's process count with
deserialize_and_load on myplugin. One compiled for this GPU (its device
kind) must load; it runs on the GPU's inputs (each process its blocks),
and every output is compared with jax's CPU backend's within its
tolerance (random bits exactly). One compiled for another GPU must be
refused. It prints one line per artifact and exits non-zero on any
difference, failed load or accepted artifact of another GPU, or when no
artifact was compiled for this GPU and process count.
"""
from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# Largest |got - want| over largest |want|, per output kind: float32
# elementwise; float32 matmuls (TF32 on NVIDIA GPUs by jax's default
# precision); bfloat16 and float16 results; integer bits exactly.
TOL = {"f32": 1e-5, "f32_matmul": 5e-3, "bf16": 2e-2, "f16": 1e-2, "exact": 0.0}


def inputs() -> dict[str, list[np.ndarray]]:
  import ml_dtypes
  rng = np.random.default_rng(7)
  v = rng.normal(size=(256,)).astype(np.float32)
  mf = rng.normal(size=(128, 128)).astype(np.float32)
  return {
      "numerics": [v, mf.astype(ml_dtypes.bfloat16), mf],
      "control": [v, mf],
      "train_step": [rng.normal(size=(16, 64)).astype(np.float32) / 4, np.zeros(64, np.float32),
                     rng.normal(size=(64, 4)).astype(np.float32) / 8, np.zeros(4, np.float32),
                     rng.normal(size=(32, 16)).astype(np.float32), rng.normal(size=(32, 4)).astype(np.float32)],
  }


def programs() -> dict:
  """name -> (function, the kind of each output for TOL)."""
  import jax
  import jax.numpy as jnp

  def numerics(v, m, mf):
    return (jnp.sin(v) + jnp.log1p(jnp.abs(v)) + jax.lax.erf(v) + jnp.power(jnp.abs(v) + 1, 1.5), m @ m, mf @ mf)

  def control(v, mf):
    key = jax.random.key(0)
    noise = jax.random.normal(key, v.shape)
    total, running = jax.lax.scan(lambda c, e: (c + e, c * e), 0.0, v + noise)
    rows = jax.vmap(jnp.dot)(mf, mf)
    slope = jax.grad(lambda w: jnp.sum(jnp.tanh(w * v)))(1.5)
    return total, running.astype(jnp.float16), rows, slope, jax.random.bits(key, (1024,), jnp.uint32)

  def train_step(w1, b1, w2, b2, x, y):
    def loss(p):
      h = jnp.tanh(x @ p[0] + p[1])
      return jnp.mean((h @ p[2] + p[3] - y) ** 2)
    value, grads = jax.value_and_grad(loss)((w1, b1, w2, b2))
    return value, tuple(p - 0.1 * g for p, g in zip((w1, b1, w2, b2), grads))

  return {"numerics": (numerics, ["f32", "bf16", "f32_matmul"]),
          "control": (control, ["f32", "f16", "f32", "f32", "exact"]),
          "train_step": (train_step, ["f32_matmul"] * 5)}


def multiprocess_programs() -> dict:
  """name -> (function, the PartitionSpec of each input over the mesh axis
  "d", the kind of each output for TOL): programs over N processes."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import PartitionSpec as P

  def collectives(v):
    n = jax.lax.psum(1, "d")
    return (jax.lax.psum(v, "d"), jax.lax.all_gather(v, "d", tiled=True),
            jax.lax.psum_scatter(v, "d", scatter_dimension=1, tiled=True),
            jax.lax.ppermute(v, "d", [(j, (j + 1) % n) for j in range(n)]),
            jax.lax.all_to_all(v, "d", split_axis=1, concat_axis=1, tiled=True))

  def collectives_program(mesh):
    return jax.shard_map(collectives, mesh=mesh, in_specs=P("d"), out_specs=(P("d"),) * 5)

  train_step = programs()["train_step"][0]
  return {"collectives": (collectives_program, [P("d")], ["f32"] * 5),
          "train_step": (lambda mesh: train_step, [P()] * 4 + [P("d")] * 2, ["f32_matmul"] * 5)}


def multiprocess_inputs(processes: int) -> dict[str, list[np.ndarray]]:
  rng = np.random.default_rng(11)
  n = processes
  return {"collectives": [(np.arange(n * 4 * n, dtype=np.float32).reshape(n, 4 * n) * 7 % 11) - 5],
          "train_step": inputs()["train_step"][:4] + [rng.normal(size=(8 * n, 16)).astype(np.float32),
                                                      rng.normal(size=(8 * n, 4)).astype(np.float32)]}


def reference(out: str, processes: int = 1) -> None:
  """The programs on jax's CPU backend (JAX_PLATFORMS=cpu, as many devices
  as processes), pickled."""
  import jax
  from jax.sharding import Mesh, NamedSharding
  assert jax.default_backend() == "cpu", jax.default_backend()
  got = {}
  if processes == 1:
    for name, (fn, _) in programs().items():
      got[name] = [np.asarray(a) for a in jax.tree.leaves(jax.jit(fn)(*inputs()[name]))]
  else:
    assert jax.device_count() == processes, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("d",))
    for name, (make, specs, _) in multiprocess_programs().items():
      args = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(multiprocess_inputs(processes)[name], specs)]
      got[name] = [np.asarray(a) for a in jax.tree.leaves(jax.jit(make(mesh))(*args))]
  with open(out, "wb") as f:
    pickle.dump(got, f)


def processes_of(topology: str) -> int:
  """The process count of a topology `<slices>x<hosts>x<GPUs per host>` of one GPU per host."""
  slices, hosts, per_host = (int(x) for x in topology.split("x"))
  if per_host != 1:
    raise SystemExit(f"topology {topology}: only one GPU per process (1x1x1, 1xNx1) is built here")
  return slices * hosts


def build(folder: str, gpus: list[str], topology_names: list[str]) -> None:
  os.makedirs(folder, exist_ok=True)
  for topology in topology_names:
    processes = processes_of(topology)
    ref_path = os.path.join(folder, "reference.pkl")
    subprocess.run([sys.executable, __file__, "reference", ref_path, "--processes", str(processes)], check=True,
                   timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(processes)})
    with open(ref_path, "rb") as f:
      want = pickle.load(f)
    os.remove(ref_path)
    if processes == 1:
      build_one_process(folder, gpus, want)
    else:
      build_multiprocess(folder, gpus, topology, processes, want)


def build_multiprocess(folder: str, gpus: list[str], topology: str, processes: int, want: dict) -> None:
  import jax
  from jax.experimental import topologies
  from jax.experimental.serialize_executable import serialize
  from jax.sharding import NamedSharding

  for target in gpus:
    topo = topologies.get_topology_desc(platform="myplugin", topology=topology, gpu=target)
    mesh = topologies.make_mesh(topo, (processes,), ("d",))
    for name, (make, specs, kinds) in multiprocess_programs().items():
      args = multiprocess_inputs(processes)[name]
      shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, s)) for a, s in zip(args, specs)]
      start = time.perf_counter()
      compiled = jax.jit(make(mesh)).lower(*shapes).compile()
      seconds = time.perf_counter() - start
      blob, in_tree, out_tree = serialize(compiled)
      entry = {"gpu": target, "device_kind": topo.devices[0].device_kind, "topology": topology,
               "processes": processes, "specs": specs, "blob": blob, "in_tree": in_tree, "out_tree": out_tree,
               "args": args, "want": want[name], "kinds": kinds, "compile_seconds": seconds, "jax": jax.__version__}
      path = os.path.join(folder, f"{name}-{target}-{topology}.pkl")
      with open(path, "wb") as f:
        pickle.dump(entry, f)
      print(f"built {os.path.basename(path)}: {len(blob)} bytes, compiled in {seconds:.2f} s", flush=True)


def build_one_process(folder: str, gpus: list[str], want: dict) -> None:
  import jax
  from jax.experimental import topologies
  from jax.experimental.serialize_executable import serialize

  for target in gpus:
    topo = topologies.get_topology_desc(platform="myplugin", topology="1x1x1", gpu=target)
    for name in programs():
      fn, kinds = programs()[name]
      args = inputs()[name]
      shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype,
                                     sharding=jax.sharding.SingleDeviceSharding(topo.devices[0])) for a in args]
      start = time.perf_counter()
      compiled = jax.jit(fn).lower(*shapes).compile()
      seconds = time.perf_counter() - start
      blob, in_tree, out_tree = serialize(compiled)
      entry = {"gpu": target, "device_kind": topo.devices[0].device_kind, "blob": blob, "in_tree": in_tree,
               "out_tree": out_tree, "args": args, "want": want[name], "kinds": kinds,
               "compile_seconds": seconds, "jax": jax.__version__}
      path = os.path.join(folder, f"{name}-{target}.pkl")
      with open(path, "wb") as f:
        pickle.dump(entry, f)
      print(f"built {os.path.basename(path)}: {len(blob)} bytes, compiled in {seconds:.2f} s", flush=True)


def worst(got: np.ndarray, want: np.ndarray) -> float:
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  if got.shape != want.shape:
    return float("inf")
  scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
  return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def arguments(e: dict, loaded) -> list:
  """The artifact's inputs: as they are in one process; over N processes,
  global arrays of which this process holds its blocks, laid out as the
  loaded executable takes them (else by the specs over every device)."""
  if e.get("processes", 1) == 1:
    return e["args"]
  import jax
  from jax.sharding import Mesh, NamedSharding
  try:
    shardings = jax.tree.leaves(loaded.input_shardings[0])
  except Exception:  # noqa: BLE001: an older jax's loaded executable: the specs' layout
    shardings = []
  if len(shardings) != len(e["args"]):
    mesh = Mesh(np.array(jax.devices()), ("d",))
    shardings = [NamedSharding(mesh, s) for s in e["specs"]]
  return [jax.make_array_from_callback(a.shape, sharding, lambda i, a=a: a[i])
          for a, sharding in zip(e["args"], shardings)]


def outputs(out, e: dict) -> list[tuple[np.ndarray, np.ndarray]]:
  """(got, want) per output, or per block of it that this process holds."""
  import jax
  leaves = jax.tree.leaves(out)
  if e.get("processes", 1) == 1:
    return [(np.asarray(a), w) for a, w in zip(leaves, e["want"])]
  return [[(np.asarray(s.data), w[s.index]) for s in a.addressable_shards] for a, w in zip(leaves, e["want"])]


def check(folder: str) -> int:
  import jax
  from jax.experimental.serialize_executable import deserialize_and_load

  device = jax.devices()[0]
  processes = jax.process_count()
  print(f"device: {device.platform} {device.device_kind}; process {jax.process_index()} of {processes}; "
        f"jax {jax.__version__}", flush=True)
  failed = 0
  ran = 0
  for file in sorted(os.listdir(folder)):
    if not file.endswith(".pkl"):
      continue
    with open(os.path.join(folder, file), "rb") as f:
      e = pickle.load(f)
    if e.get("processes", 1) != processes:
      continue  # another job's (1x1x1 for one process, 1xNx1 for N)
    expect_refusal = e["device_kind"] != device.device_kind
    try:
      start = time.perf_counter()
      loaded = deserialize_and_load(e["blob"], e["in_tree"], e["out_tree"], backend="myplugin")
      load_s = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001: the refusal's text is the result
      first = str(err).splitlines()[0]
      ok = expect_refusal and "compiled ahead of time for" in first
      failed += not ok
      print(f"{'ok  ' if ok else 'FAIL'} {file}: refused to load: {first}", flush=True)
      continue
    if expect_refusal:
      failed += 1
      print(f"FAIL {file}: compiled for {e['device_kind']}, but loaded on {device.device_kind}", flush=True)
      continue
    ran += 1
    args = arguments(e, loaded)
    start = time.perf_counter()
    out = jax.block_until_ready(loaded(*args))
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(20):
      out = jax.block_until_ready(loaded(*args))
    run_s = (time.perf_counter() - start) / 20
    pairs = outputs(out, e)
    errors = [max((worst(g, w) for g, w in p), default=float("inf")) if isinstance(p, list) else worst(*p)
              for p in pairs]
    bad = [f"output {i} ({k}): {err:.2e} > {TOL[k]:.0e}" for i, (err, k) in enumerate(zip(errors, e["kinds"]))
           if not err <= TOL[k]] + ([f"{len(pairs)} outputs, {len(e['want'])} expected"]
                                    if len(pairs) != len(e["want"]) else [])
    failed += bool(bad)
    print(f"{'FAIL' if bad else 'ok  '} {file}: loaded in {load_s:.3f} s, first run {first_s * 1e3:.1f} ms, "
          f"then {run_s * 1e6:.0f} us; compiled here in {e['compile_seconds']:.2f} s with jax {e['jax']}; "
          f"worst relative error per output {['%.1e' % x for x in errors]}" + (f"; {'; '.join(bad)}" if bad else ""),
          flush=True)
  if ran == 0:
    print(f"FAIL: no artifact was compiled for {device.device_kind} and {processes} process(es)", flush=True)
  return 1 if failed or ran == 0 else 0


def selftest(folder: str, reference_path: str) -> int:
  """The multi-process check where no GPU is (tests/test_gpu_kit.py): in
  each process of an N-process job on this platform, the multi-process
  programs compiled for this job's devices and serialized as `build` does,
  with jax's CPU backend's outputs (REFERENCE, `reference --processes N`);
  `check` must pass on them, and fail once one reference value is off.
  Returns 0 when both hold."""
  import jax
  from jax.experimental.serialize_executable import serialize
  from jax.sharding import Mesh, NamedSharding

  processes = jax.process_count()
  folder = os.path.join(folder, str(jax.process_index()))
  os.makedirs(folder, exist_ok=True)
  with open(reference_path, "rb") as f:
    want = pickle.load(f)
  mesh = Mesh(np.array(jax.devices()), ("d",))
  for name, (make, specs, kinds) in multiprocess_programs().items():
    args = multiprocess_inputs(processes)[name]
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, s)) for a, s in zip(args, specs)]
    blob, in_tree, out_tree = serialize(jax.jit(make(mesh)).lower(*shapes).compile())
    with open(os.path.join(folder, f"{name}-here-1x{processes}x1.pkl"), "wb") as f:
      pickle.dump({"gpu": "here", "device_kind": jax.devices()[0].device_kind, "topology": f"1x{processes}x1",
                   "processes": processes, "specs": specs, "blob": blob, "in_tree": in_tree, "out_tree": out_tree,
                   "args": args, "want": want[name], "kinds": kinds, "compile_seconds": 0.0,
                   "jax": jax.__version__}, f)
  passed = check(folder)
  path = os.path.join(folder, f"collectives-here-1x{processes}x1.pkl")
  with open(path, "rb") as f:
    e = pickle.load(f)
  e["want"][0] = e["want"][0] + np.float32(1)
  with open(path, "wb") as f:
    pickle.dump(e, f)
  failed = check(folder)
  print(f"SELFTEST check on the right values: {passed}; with one output off by 1: {failed}", flush=True)
  return 0 if (passed, failed) == (0, 1) else 1


def main() -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("mode", choices=["build", "check", "reference", "selftest"])
  parser.add_argument("folder")
  parser.add_argument("--gpus", default="h100,h200", help="build: the GPUs to compile for")
  parser.add_argument("--topologies", default="1x1x1", help="build: 1x1x1 and/or 1xNx1 (N processes of one GPU)")
  parser.add_argument("--processes", type=int, default=1, help="reference: the process count of the programs")
  parser.add_argument("--reference", help="selftest: the pickle of `reference --processes N`")
  args = parser.parse_args()
  if args.mode == "reference":
    reference(args.folder, args.processes)
    return 0
  if args.mode == "selftest":
    return selftest(args.folder, args.reference)
  if args.mode == "build":
    build(args.folder, [g for g in args.gpus.split(",") if g], [t for t in args.topologies.split(",") if t])
    return 0
  return check(args.folder)


if __name__ == "__main__":
  sys.exit(main())

"""GPU training programs compiled for a named GPU and topology with no GPU:
myplugin's schedule against jax's own CUDA backend's, side by side.

Each program is compiled through myplugin's compile-only topology
(`get_topology_desc(platform="myplugin", gpu=...)`) and through jax's CUDA
backend's, given the same GPU as myplugin's target text
(`_myplugin.gpu_target_config`; jax's side needs
JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 without a GPU, set here). Each side
compiles in a process of its own. For each program it prints the
collectives, the async pairs, the ring bytes a device moves, and the share
of the GEMM FLOPs that the schedule issues while a collective (of 64 KiB or
more) is in flight (bench/schedule_analysis.py). These are compile-only
results: the times need a GPU (bench/gpu_multiprocess.py).

The programs (bf16), on `1x2x4` (2 hosts x 4 GPUs) by default:
  fsdp4        FSDP step: 4 layers D 2048, F 8192, 2048 tokens a device,
               weights sharded by rows and gathered before use
  fsdp8_remat  the same with 8 layers, each under jax.checkpoint
  megatron     a tensor-parallel MLP (D 4096, F 16384) on (data = hosts,
               model = GPUs of a host), 4096 tokens a data shard
  dp12         a data-parallel MLP step of 12 parameter arrays
  pipeline     a pipeline loop: 16 steps of a stage's matmul and a shift
               to the next stage (collective-permute, non-cyclic)
  moe          an expert-parallel MoE layer (bench/moe_layer.py): 4096
               tokens a device, D 2048, F 8192, one expert a device, tokens
               dispatched and returned with lax.ragged_all_to_all

usage: python bench/gpu_schedule.py [--gpu h100] [--topology 1x2x4] [--programs fsdp4,...] [--out table.md]
                                   [--check-bytes]

Issue 51's goal lines follow the table: per program, whether myplugin's
share is at least jax's and its bytes at most jax's. --check-bytes exits 1
where myplugin moves more bytes than jax (a count, not a time: CI's GPU
compile matrix runs it).
Needs jax's CUDA plugin and engine (pip install '.[gpu-compile]').
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import kill_groups  # noqa: E402

PROGRAMS = ("fsdp4", "fsdp8_remat", "megatron", "dp12", "pipeline", "moe")


def _programs(devices, names):
  """{name: (jitted function, abstract arguments)} over `devices`."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  import training_step

  bf16 = jnp.bfloat16
  n = len(devices)
  out = {}

  def arg(shape, sharding):
    return jax.ShapeDtypeStruct(shape, bf16, sharding=sharding)

  if "fsdp4" in names or "fsdp8_remat" in names:
    mesh = Mesh(np.array(devices), ("d",))
    rows = NamedSharding(mesh, P("d", None))
    for name, layers, remat in (("fsdp4", 4, False), ("fsdp8_remat", 8, True)):
      if name in names:
        ws = [(arg((2048, 8192), rows), arg((8192, 2048), rows)) for _ in range(layers)]
        out[name] = (training_step.fsdp_step(mesh, layers, remat), (ws, arg((2048 * n, 2048), rows)))
  if "megatron" in names:
    hosts = max(n // 4, 1)
    mesh = Mesh(np.array(devices).reshape(hosts, n // hosts), ("data", "model"))
    import tensor_parallel_step
    specs = {"w1": P(None, "model"), "w2": P("model", None)}
    params = {"w1": arg((4096, 16384), NamedSharding(mesh, specs["w1"])),
              "w2": arg((16384, 4096), NamedSharding(mesh, specs["w2"]))}
    batch = NamedSharding(mesh, P("data", None))
    step = jax.jit(tensor_parallel_step.step,
                   out_shardings=({k: NamedSharding(mesh, v) for k, v in specs.items()}, NamedSharding(mesh, P())))
    out["megatron"] = (step, (params, arg((4096 * hosts, 4096), batch), arg((4096 * hosts, 4096), batch)))
  if "dp12" in names:
    mesh = Mesh(np.array(devices), ("d",))
    widths = [2048] + [4096] * 5 + [2048]
    whole = NamedSharding(mesh, P())
    params = {}
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
      params[f"w{i}"] = arg((a, b), whole)
      params[f"b{i}"] = arg((b,), whole)
    batch = NamedSharding(mesh, P("d"))
    out["dp12"] = (jax.jit(training_step.deep_step),
                   (params, arg((2048 * n, widths[0]), batch), arg((2048 * n, widths[-1]), batch)))
  if "pipeline" in names:
    mesh = Mesh(np.array(devices), ("stage",))

    def stages(w, x):
      def body(_, carry):
        h, acc = carry
        h = jnp.tanh(h @ w[0])
        h = jax.lax.ppermute(h, "stage", [(i, i + 1) for i in range(n - 1)])
        return h, acc + h
      return jax.lax.fori_loop(0, 16, body, (x[0], jnp.zeros_like(x[0])))[1][None]

    f = jax.jit(jax.shard_map(stages, mesh=mesh, in_specs=(P("stage"), P("stage")), out_specs=P("stage")))
    spec = NamedSharding(mesh, P("stage"))
    out["pipeline"] = (f, (arg((n, 4096, 4096), spec), arg((n, 2048, 4096), spec)))
  if "moe" in names:
    import moe_layer
    mesh = Mesh(np.array(devices), ("e",))
    rows = NamedSharding(mesh, P("e"))
    out["moe"] = (moe_layer.layer(mesh, "e", capacity=2 * 4096),
                  (arg((4096 * n, 2048), rows), jax.ShapeDtypeStruct((4096 * n,), jnp.int32, sharding=rows),
                   arg((n, 2048, 8192), rows), arg((n, 8192, 2048), rows)))
  return out


def side(backend: str, gpu: str, topology: str, names: list[str]) -> None:
  """Compiles the programs through one backend; prints a JSON line each."""
  from jax.experimental import topologies

  import schedule_analysis
  if backend == "myplugin":
    topo = topologies.get_topology_desc(platform="myplugin", topology=topology, gpu=gpu)
  else:
    from jax_plugin import _myplugin
    topo = topologies.get_topology_desc(platform="cuda", topology=topology,
                                        target_config=_myplugin.gpu_target_config(gpu, 13))
  for name, (fn, args) in _programs(topo.devices, names).items():
    text = fn.lower(*args).compile().as_text()
    s = schedule_analysis.analyse(text, len(topo.devices))
    print("RESULT", json.dumps({"program": name, "collectives": s.collectives, "kinds": s.kinds,
                                "async_pairs": s.async_pairs, "ring_bytes": s.ring_bytes,
                                "gemm_flops": s.gemm_flops, "share": s.in_flight_share}), flush=True)


def run_side(backend: str, gpu: str, topology: str, names: list[str], env=None, timeout: float = 900) -> dict:
  environ = dict(os.environ, JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
                 JAX_PLATFORMS="myplugin" if backend == "myplugin" else "cpu", **(env or {}))
  # Its own process group, killed whole on the way out (a deadline, an error).
  proc = subprocess.Popen([sys.executable, __file__, "--side", backend, "--gpu", gpu, "--topology", topology,
                           "--programs", ",".join(names)], env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  finally:
    kill_groups([proc])
  if proc.returncode != 0:
    raise SystemExit(f"{backend}'s compiles failed:\n{err[-4000:]}")
  return {d["program"]: d for d in (json.loads(l[len("RESULT "):]) for l in out.splitlines()
                                    if l.startswith("RESULT "))}


def table(ours: dict, jax_: dict, names: list[str], versions: str) -> str:
  def kinds(d):
    return ", ".join(f"{v} {k}" for k, v in sorted(d["kinds"].items()))
  lines = [f"compile-only schedules ({versions}); ring bytes a device; GEMM share: FLOPs issued with a "
           "collective of 64 KiB or more in flight", "",
           "| program | myplugin: collectives | async pairs | MiB | GEMM share | jax CUDA: collectives | async pairs | "
           "MiB | GEMM share |", "|---|---|---|---|---|---|---|---|---|"]
  for name in names:
    a, b = ours[name], jax_[name]
    lines.append(f"| {name} | {kinds(a)} | {a['async_pairs']} | {a['ring_bytes'] / 2**20:.0f} | "
                 f"{a['share'] * 100:.0f} % | {kinds(b)} | {b['async_pairs']} | {b['ring_bytes'] / 2**20:.0f} | "
                 f"{b['share'] * 100:.0f} % |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--side", choices=("myplugin", "cuda"))
  parser.add_argument("--gpu", default="h100")
  parser.add_argument("--topology", default="1x2x4")
  parser.add_argument("--programs", default=",".join(PROGRAMS))
  parser.add_argument("--out")
  parser.add_argument("--check-bytes", action="store_true")
  args = parser.parse_args()
  names = [p for p in args.programs.split(",") if p]
  if args.side:
    return side(args.side, args.gpu, args.topology, names)
  import importlib.metadata as md
  versions = ", ".join(f"{d} {md.version(d)}" for d in ("jax", "jax-cuda13-pjrt", "myplugin"))
  ours = run_side("myplugin", args.gpu, args.topology, names)
  theirs = run_side("cuda", args.gpu, args.topology, names)
  text = f"{args.gpu} {args.topology}: " + table(ours, theirs, names, versions)
  more_bytes = [n for n in names if ours[n]["ring_bytes"] > theirs[n]["ring_bytes"] * 1.0001]
  goals = [f"{n}: share {'met' if ours[n]['share'] >= theirs[n]['share'] - 1e-9 else 'NOT met'}, bytes "
           f"{'NOT met' if n in more_bytes else 'met'}" for n in names]
  text += "\n\ngoal (share >= jax's, bytes <= jax's): " + "; ".join(goals)
  print(text)
  if args.out:
    with open(args.out, "w") as f:
      f.write(text + "\n")
  if args.check_bytes and more_bytes:
    sys.exit(f"myplugin moves more bytes than jax's CUDA backend in: {', '.join(more_bytes)}")


if __name__ == "__main__":
  main()

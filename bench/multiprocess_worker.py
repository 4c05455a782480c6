"""One process of a bench/multiprocess.py job: a psum over processes at
each size, then a data-parallel training step (compile time and step
time), then a tensor-parallel one on a 2-D mesh (step time). Runs on myplugin (MYPLUGIN_* variables set) or on jax's CPU backend
over Gloo (BENCH_JAX_COORDINATOR set). Process 0 prints RESULT lines:

  RESULT psum BYTES BEST_S MEDIAN_S
  RESULT compile SECONDS CPU_SECONDS  (CPU: this process's, all its threads)
  RESULT step BEST_S MEDIAN_S
  RESULT tp_step BEST_S MEDIAN_S

With a second argument `deep` (or `deep:BATCH`), only the deep MLP's step
(12 parameter arrays, bench/training_step.py; batch 1024) runs, 50 times
after its warm-up:

  RESULT deep_step BEST_S MEDIAN_S

With `fsdp` (or `fsdp:LAYERS[:D:F:TOKENS]`), only the FSDP step
(bench/training_step.py; 2 layers, D 1024, F 4096, 256 tokens: 16 MB a
weight, so the gradients' bytes count) runs, 30 times after its warm-up:

  RESULT fsdp_step BEST_S MEDIAN_S
"""
import os
import sys
import time

import jax

if os.environ.get("BENCH_JAX_COORDINATOR"):
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(os.environ["BENCH_JAX_COORDINATOR"], int(os.environ["BENCH_NUM_PROCESSES"]),
                             int(os.environ["BENCH_PROCESS_ID"]))

import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import tensor_parallel_step  # noqa: E402  (bench/, the script's own folder)
import training_step  # noqa: E402
from timing import timed  # noqa: E402

sizes = [int(s) for s in sys.argv[1].split(",") if s]
me = jax.process_index()
mesh = Mesh(np.array(jax.devices()), ("d",))
n = len(jax.devices())


if sys.argv[2:3] and sys.argv[2].startswith("fsdp"):
  layers, d, f, tokens = (int(v) for v in (sys.argv[2].split(":")[1:] + ["2", "1024", "4096", "256"][
      len(sys.argv[2].split(":")) - 1:])[:4])
  ws, xs = training_step.fsdp_inputs(mesh, layers, d, f, tokens)
  fsdp = training_step.fsdp_step(mesh, len(ws))
  best, med = timed(lambda: jax.block_until_ready(fsdp(ws, xs)), 30)
  if me == 0:
    print(f"RESULT fsdp_step {best} {med}", flush=True)
  sys.exit(0)


if sys.argv[2:3] and sys.argv[2].startswith("deep"):
  params, xs, ys = training_step.deep_inputs(mesh, int(sys.argv[2].partition(":")[2] or 1024))
  deep = jax.jit(training_step.deep_step)
  best, med = timed(lambda: jax.block_until_ready(deep(params, xs, ys)), 50)
  if me == 0:
    print(f"RESULT deep_step {best} {med}", flush=True)
  sys.exit(0)


psum = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "d"), mesh=mesh, in_specs=P("d"), out_specs=P("d")))
for nbytes in sizes:
  count = max(nbytes // 4, 1)
  x = jax.make_array_from_callback((n * count,), NamedSharding(mesh, P("d")),
                                   lambda i: np.ones(count, np.float32))
  reps = max(3, min(30, (64 << 20) // nbytes))
  best, med = timed(lambda: psum(x).block_until_ready(), reps)
  if me == 0:
    print(f"RESULT psum {nbytes} {best} {med}", flush=True)

# The data-parallel training step (bench/training_step.py).
params, xs, ys = training_step.inputs(mesh)
step = training_step.step


c0, t0 = time.process_time(), time.perf_counter()
compiled = jax.jit(step).lower(params, xs, ys).compile()
compile_s = time.perf_counter() - t0
compile_cpu_s = time.process_time() - c0
best, med = timed(lambda: jax.block_until_ready(compiled(params, xs, ys)), 20)
if me == 0:
  print(f"RESULT compile {compile_s} {compile_cpu_s}", flush=True)
  print(f"RESULT step {best} {med}", flush=True)

# The tensor-parallel step (bench/tensor_parallel_step.py).
mesh2 = tensor_parallel_step.mesh_2d(jax.devices())
tp_params, tp_x, tp_y = tensor_parallel_step.inputs(mesh2)
tp = jax.jit(tensor_parallel_step.step)
best, med = timed(lambda: jax.block_until_ready(tp(tp_params, tp_x, tp_y)), 20)
if me == 0:
  print(f"RESULT tp_step {best} {med}", flush=True)

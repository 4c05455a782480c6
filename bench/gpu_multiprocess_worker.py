"""One process of a bench/gpu_multiprocess.py job, long-lived so that start-up
is never timed: it joins the job, compiles every program and runs each once,
checks each psum's result, prints `READY PLATFORM DEVICE_KIND GLOBAL_DEVICES
LOSS` (the training step's first loss, for the driver to compare across
backends), then for each line
`round` on its stdin measures one round and prints `DONE`; `quit` or the end
of its stdin (the driver gone) ends it.

  python gpu_multiprocess_worker.py SIZES WIDTHS BATCH STEP_REPS PSUM_BYTES_PER_SIZE [FSDP]

SIZES: comma-separated psum sizes in bytes (may be empty); WIDTHS: the MLP's
widths (input,hidden...,output); BATCH: its global batch; STEP_REPS: timed
steps per round; PSUM_BYTES_PER_SIZE: about how many bytes each size's timed
psums move per round (3 to 30 calls); FSDP: LAYERS:D:F:TOKENS:DTYPE of
bench/training_step.py's FSDP step (TOKENS over all devices; DTYPE bfloat16
or float32), timed as the MLP's step is; none when left out.

With BENCH_PROFILE_DIR set, each process also takes a profile of three FSDP
steps before READY (jax.profiler.trace into BENCH_PROFILE_DIR/process-<i>),
for bench/gpu_overlap.py: whether NCCL's kernels ran beside the GEMMs.

The job is myplugin's (BENCH_BACKEND=myplugin; the driver sets MYPLUGIN_*)
or jax's own (BENCH_BACKEND=jax: jax.distributed.initialize at
BENCH_JAX_COORDINATOR with BENCH_NUM_PROCESSES, BENCH_PROCESS_ID and
local_device_ids=[0]; on jax's CPU backend over Gloo). BENCH_DEADLINE_S ends
the process with exit code 124 when it is reached, whatever it is doing.
Process 0 prints, per round:

  RESULT psum BYTES BEST_S MEDIAN_S
  RESULT step BEST_S MEDIAN_S
  RESULT fsdp BEST_S MEDIAN_S
"""
import os
import sys
import threading

_deadline = threading.Timer(float(os.environ["BENCH_DEADLINE_S"]), lambda: os._exit(124))
_deadline.daemon = True
_deadline.start()

import jax  # noqa: E402

if os.environ["BENCH_BACKEND"] == "jax":
  if os.environ.get("JAX_PLATFORMS") == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(os.environ["BENCH_JAX_COORDINATOR"], int(os.environ["BENCH_NUM_PROCESSES"]),
                             int(os.environ["BENCH_PROCESS_ID"]), local_device_ids=[0])

import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import training_step  # noqa: E402  (bench/, the script's own folder)
from timing import timed  # noqa: E402

sizes = [int(s) for s in sys.argv[1].split(",") if s]
widths = [int(w) for w in sys.argv[2].split(",")]
batch, step_reps, psum_bytes = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
me = jax.process_index()
devices = jax.devices()
mesh = Mesh(np.array(devices), ("d",))
n = len(devices)


psum = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "d"), mesh=mesh, in_specs=P("d"), out_specs=P("d")))
cases, operands = [], {}  # (label, fn, reps); bytes -> psum operand
for nbytes in sizes:
  count = max(nbytes // 4, 1)
  x = operands[nbytes] = jax.make_array_from_callback((n * count,), NamedSharding(mesh, P("d")),
                                                      lambda i, c=count: np.ones(c, np.float32))
  cases.append((f"psum {nbytes}", lambda x=x: psum(x).block_until_ready(), max(3, min(30, psum_bytes // nbytes))))

params, xs, ys = training_step.deep_inputs(mesh, batch, widths)
step = jax.jit(training_step.deep_step).lower(params, xs, ys).compile()
cases.append(("step", lambda: jax.block_until_ready(step(params, xs, ys)), step_reps))
fsdp_run = None
if len(sys.argv) > 6 and sys.argv[6]:
  import jax.numpy as jnp
  layers, d, f, tokens, dtype = sys.argv[6].split(":")
  ws, fx = training_step.fsdp_inputs(mesh, int(layers), int(d), int(f), int(tokens), jnp.dtype(dtype))
  fsdp = training_step.fsdp_step(mesh, int(layers))
  fsdp_run = lambda: jax.block_until_ready(fsdp(ws, fx))  # noqa: E731
  cases.append(("fsdp", fsdp_run, step_reps))

# Compile and set up (communicators) before READY; check what each computes.
for nbytes, x in operands.items():
  got = np.asarray(psum(x).addressable_shards[0].data)
  if not np.all(got == n):
    sys.exit(f"psum of {nbytes} bytes over {n} processes: expected {n} everywhere, got {got[:8]}...")
for _, fn, _ in cases:
  fn()
loss = float(step(params, xs, ys)[1])
if fsdp_run is not None and os.environ.get("BENCH_PROFILE_DIR"):
  with jax.profiler.trace(os.path.join(os.environ["BENCH_PROFILE_DIR"], f"process-{me}")):
    for _ in range(3):
      fsdp_run()
print(f"READY {devices[0].platform} {devices[0].device_kind.replace(' ', '_')} {n} {loss!r}", flush=True)

for line in sys.stdin:
  if line.strip() != "round":
    break
  for label, fn, reps in cases:
    best, med = timed(fn, reps)
    if me == 0:
      print(f"RESULT {label} {best} {med}", flush=True)
  print("DONE", flush=True)

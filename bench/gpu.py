"""GPU benchmark: myplugin over XLA's CUDA engine against jax's own CUDA plugin.

Both backends live in one process and every measurement is interleaved
round by round, so that clocks and noise hit them alike:
  myplugin  our plugin with MYPLUGIN_ENGINE=cuda (the JAX_PLATFORMS name "myplugin");
  cuda      jax's own CUDA plugin (jax_plugins.xla_cuda13 or xla_cuda12).
Cases: the dispatch of a tiny jitted function, an 8192x8192 bf16 matmul and
an MLP train step (grad + SGD update). The two share the GPU's memory: jax's
own plugin is held to --cuda-memory-fraction of it.

usage: MYPLUGIN_ENGINE=cuda python bench/gpu.py [--rounds 7] [--quick] [--platforms myplugin,cuda]
Prints best and median per backend and the ratio myplugin/cuda (goal: <= 1.05).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def parse(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--quick", action="store_true", help="2 rounds and small sizes, for a smoke run")
  parser.add_argument("--platforms", default="myplugin,cuda", help="comma-separated; the first is the numerator")
  parser.add_argument("--cuda-memory-fraction", type=float, default=0.2,
                      help="of the GPU's memory for jax's own CUDA plugin (myplugin's engine takes its default)")
  args = parser.parse_args(argv)
  args.platforms = [p for p in args.platforms.split(",") if p]
  if not args.platforms:
    parser.error("--platforms names no platform")
  if args.quick:
    args.rounds = 2
  return args


def tiny_dispatch(jax, jnp, np, device, quick):
  f = jax.jit(lambda x: x + 1)
  x = jax.device_put(np.float32(1), device)
  f(x).block_until_ready()
  calls = 200 if quick else 2000

  def run():
    y = x
    for _ in range(calls):
      y = f(y)
    y.block_until_ready()

  return run, calls, None


def matmul_bf16(jax, jnp, np, device, quick):
  n = 1024 if quick else 8192
  key = jax.random.PRNGKey(0)
  a = jax.device_put(jax.random.normal(key, (n, n), jnp.bfloat16), device)
  b = jax.device_put(jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.bfloat16), device)
  f = jax.jit(lambda a, b: a @ b)
  f(a, b).block_until_ready()
  reps = 10

  def run():
    for _ in range(reps):
      y = f(a, b)
    y.block_until_ready()

  return run, reps, 2 * n ** 3  # flops per call


def mlp_train_step(jax, jnp, np, device, quick):
  width, batch, layers = (256, 64, 3) if quick else (4096, 1024, 4)
  rng = np.random.default_rng(0)
  params = [(jax.device_put((rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32), device),
             jax.device_put(np.zeros(width, np.float32), device)) for _ in range(layers)]
  x = jax.device_put(rng.normal(size=(batch, width)).astype(np.float32), device)
  y = jax.device_put(rng.normal(size=(batch, width)).astype(np.float32), device)

  def loss(params, x, y):
    for w, b in params:
      x = jnp.tanh(x @ w + b)
    return jnp.mean((x - y) ** 2)

  @jax.jit
  def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

  jax.block_until_ready(step(params, x, y))
  steps = 20

  def run():
    p = params
    for _ in range(steps):
      p = step(p, x, y)
    jax.block_until_ready(p)

  return run, steps, None


CASES = (("tiny jit dispatch", tiny_dispatch), ("matmul 8192x8192 bf16", matmul_bf16),
         ("MLP train step", mlp_train_step))


def fmt(seconds):
  for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
    if seconds >= scale:
      return f"{seconds / scale:.3g} {unit}"
  return f"{seconds * 1e9:.3g} ns"


def main(argv=None):
  args = parse(argv)
  os.environ["JAX_PLATFORMS"] = ",".join(args.platforms)
  # jax's own CUDA plugin preallocates 75% of the GPU unless told otherwise;
  # it must leave room for myplugin's engine in the same process.
  os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", str(args.cuda_memory_fraction))
  import jax
  import jax.numpy as jnp
  import numpy as np

  devices = {}
  for p in args.platforms:
    try:
      devices[p] = jax.devices(p)[0]
    except RuntimeError as e:
      sys.exit(f"bench/gpu.py: platform '{p}' is not available ({e}); myplugin needs MYPLUGIN_ENGINE=cuda "
               "and a GPU, 'cuda' needs jax's own CUDA plugin")
  print(f"jax {jax.__version__}; " + "; ".join(f"{p}: {d.device_kind}" for p, d in devices.items()))
  rows = []
  for name, case in CASES:
    runs = {p: case(jax, jnp, np, devices[p], args.quick) for p in args.platforms}
    times = {p: [] for p in args.platforms}
    for _ in range(args.rounds):
      for p in args.platforms:  # interleaved: one round of each, in turn
        run, count, _ = runs[p]
        start = time.perf_counter()
        run()
        times[p].append((time.perf_counter() - start) / count)
    per_call = {p: (min(t), statistics.median(t)) for p, t in times.items()}
    flops = runs[args.platforms[0]][2]
    rows.append((name, per_call, flops))

  first = args.platforms[0]
  header = f"{'case':24s}" + "".join(f"{p + ' best':>14s}{p + ' median':>16s}" for p in args.platforms)
  if len(args.platforms) > 1:
    header += "".join(f"{first + '/' + p:>18s}" for p in args.platforms[1:])
  print(header)
  for name, per_call, flops in rows:
    line = f"{name:24s}" + "".join(f"{fmt(per_call[p][0]):>14s}{fmt(per_call[p][1]):>16s}" for p in args.platforms)
    line += "".join(f"{per_call[first][1] / per_call[p][1]:>18.3f}" for p in args.platforms[1:])
    if flops:
      line += "   " + ", ".join(f"{p} {flops / per_call[p][0] / 1e12:.3g} TFLOP/s" for p in args.platforms)
    print(line)
  print("(per call; ratios of medians; goal <= 1.05)")
  return 0


if __name__ == "__main__":
  sys.exit(main())

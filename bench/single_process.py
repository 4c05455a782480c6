"""Single-process benchmark: myplugin against the bare engine and jax's CPU backend.

Three backends live in one process and every measurement is interleaved
round by round, so that machine noise hits them alike:
  myplugin  our plugin (JAX_PLATFORMS name "myplugin");
  bare      the same XLA engine library registered directly as a plugin:
            the floor of any plugin on jax's C API path;
  cpu       jax's built-in CPU backend (jaxlib's own XLA, no C API).

usage: python bench/single_process.py [--rounds 11] [--quick]
Prints best and median per backend, and the ratios myplugin/bare and myplugin/cpu.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "myplugin,cpu,bare")
os.environ.setdefault("MYPLUGIN_NUM_DEVICES", "8")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

from jax._src import xla_bridge  # noqa: E402

import jax_plugin  # noqa: E402

xla_bridge.register_plugin("bare", library_path=jax_plugin.engine_path(), options={"cpu_device_count": 8})

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

BACKENDS = ("myplugin", "bare", "cpu")


def tiny_dispatch(platform):
  """Latency of one dispatch of a tiny jitted function (per call)."""
  device = jax.devices(platform)[0]
  f = jax.jit(lambda x: x + 1)
  x = jax.device_put(np.float32(1), device)
  f(x).block_until_ready()
  calls = 2000

  def run():
    y = x
    for _ in range(calls):
      y = f(y)
    y.block_until_ready()

  return run, calls


def mlp_step(platform):
  device = jax.devices(platform)[0]
  rng = np.random.default_rng(0)
  params = [(rng.normal(size=(512, 512)).astype(np.float32) * 0.04, np.zeros(512, np.float32)) for _ in range(3)]
  x = rng.normal(size=(256, 512)).astype(np.float32)
  params, x = jax.device_put((params, x), device)

  def loss(params, x):
    h = x
    for w, b in params:
      h = jnp.tanh(h @ w + b)
    return jnp.mean(h ** 2)

  @jax.jit
  def step(params, x):
    g = jax.grad(loss)(params, x)
    return jax.tree.map(lambda p, d: p - 0.01 * d, params, g)

  state = {"p": step(params, x)}
  jax.block_until_ready(state["p"])
  steps = 20

  def run():
    p = state["p"]
    for _ in range(steps):
      p = step(p, x)
    jax.block_until_ready(p)
    state["p"] = p

  return run, steps


def matmul(platform):
  device = jax.devices(platform)[0]
  rng = np.random.default_rng(0)
  a, b = jax.device_put((rng.normal(size=(2048, 2048)).astype(np.float32),
                         rng.normal(size=(2048, 2048)).astype(np.float32)), device)
  f = jax.jit(jnp.matmul)
  f(a, b).block_until_ready()
  reps = 3

  def run():
    for _ in range(reps):
      out = f(a, b)
    out.block_until_ready()

  return run, reps


def sharded_jit(platform):
  devices = jax.devices(platform)[:8]
  mesh = Mesh(np.array(devices).reshape(2, 4), ("x", "y"))
  x = jax.device_put(np.random.default_rng(0).normal(size=(1024, 1024)).astype(np.float32),
                     NamedSharding(mesh, P("x", "y")))

  @jax.jit
  def f(x):
    return jnp.sin(x) @ x.T + x.sum(axis=0)

  f(x).block_until_ready()
  reps = 10

  def run():
    for _ in range(reps):
      out = f(x)
    out.block_until_ready()

  return run, reps


CASES = {
    "tiny jit dispatch": tiny_dispatch,
    "MLP train step (3x512, batch 256)": mlp_step,
    "matmul 2048x2048 f32": matmul,
    "8-device sharded jit (1024x1024)": sharded_jit,
}


def fmt(seconds):
  if seconds < 1e-3:
    return f"{seconds * 1e6:8.2f} us"
  return f"{seconds * 1e3:8.2f} ms"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--rounds", type=int, default=11)
  parser.add_argument("--quick", action="store_true", help="3 rounds, for a smoke run")
  args = parser.parse_args()
  rounds = 3 if args.quick else args.rounds

  print(f"jax {jax.__version__}, {os.cpu_count()} cores, best/median of {rounds} interleaved rounds")
  print(f"myplugin: {jax.devices('myplugin')[0].client.platform_version}")
  rows = []
  for name, make in CASES.items():
    runs = {b: make(b) for b in BACKENDS}
    samples = {b: [] for b in BACKENDS}
    for _ in range(rounds):
      for b in BACKENDS:
        run, per = runs[b]
        t0 = time.perf_counter()
        run()
        samples[b].append((time.perf_counter() - t0) / per)
    best = {b: min(s) for b, s in samples.items()}
    med = {b: statistics.median(s) for b, s in samples.items()}
    rows.append((name, best, med))

  header = f"| case | myplugin best / median | bare engine best / median | jax cpu best / median | myplugin/bare (best, median) | myplugin/cpu (best, median) |"
  print(header)
  print("|" + "---|" * 6)
  for name, best, med in rows:
    print(f"| {name} | {fmt(best['myplugin'])} / {fmt(med['myplugin'])} | {fmt(best['bare'])} / {fmt(med['bare'])} "
          f"| {fmt(best['cpu'])} / {fmt(med['cpu'])} "
          f"| {best['myplugin'] / best['bare']:.3f}, {med['myplugin'] / med['bare']:.3f} "
          f"| {best['myplugin'] / best['cpu']:.3f}, {med['myplugin'] / med['cpu']:.3f} |")
  sys.stdout.flush()


if __name__ == "__main__":
  main()

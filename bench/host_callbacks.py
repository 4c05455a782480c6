"""Cost of a host callback: a jitted pure_callback (identity) on myplugin and
on jax's CPU backend in one process, interleaved round by round; best and
median per call, for a scalar and a 1M-float operand.

  JAX_PLATFORMS=myplugin,cpu python bench/host_callbacks.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np


def per_call(f, x, n):
  f(x).block_until_ready()
  t = time.perf_counter()
  for _ in range(n):
    y = f(x)
  y.block_until_ready()
  return (time.perf_counter() - t) / n


def main(rounds=7):
  for size, n in ((1, 2000), (1 << 20, 50)):
    times = {"myplugin": [], "cpu": []}
    fs = {}
    for platform in times:
      x = jax.device_put(np.ones(size, np.float32), jax.devices(platform)[0])
      f = jax.jit(lambda v: jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1)
      fs[platform] = (f, x)
    for _ in range(rounds):
      for platform, (f, x) in fs.items():
        times[platform].append(per_call(f, x, n))
    row = " | ".join(f"{p}: {min(t) * 1e6:8.1f} / {np.median(t) * 1e6:8.1f} us" for p, t in times.items())
    print(f"f32[{size}]: {row} | ratio (best) {min(times['myplugin']) / min(times['cpu']):.2f}")


if __name__ == "__main__":
  main()

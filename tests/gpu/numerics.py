"""One program of jit, grad, vmap, scan, random, linalg and bf16/f16/f32
arithmetic on jax.devices()[0], whatever the platform, and the checks of
its results against numpy. The GPU tests run it under myplugin's CUDA
engine and under jax's own CUDA backend and compare the two and numpy;
tests/test_gpu_kit.py runs it on the CPU, so that the program and the
checks are exercised where no GPU is.

usage: python numerics.py OUT.npz
"""
from __future__ import annotations

import sys

import numpy as np

DTYPES = ("float32", "bfloat16", "float16")
# Relative tolerance against numpy in float64 of the rounded inputs: the
# dtype's epsilon times a margin for sums of 64 terms (and TF32 matmuls on
# GPUs for float32).
RTOL = {"float32": 5e-3, "bfloat16": 5e-2, "float16": 1e-2}


def inputs():
  rng = np.random.default_rng(19)
  return {
      "x": rng.normal(size=(64, 64)).astype(np.float32) / 8,
      "w": rng.normal(size=(64, 32)).astype(np.float32) / 8,
      "xs": rng.normal(size=(10, 64)).astype(np.float32),
      "spd": (lambda a: a @ a.T + 64 * np.eye(64))(rng.normal(size=(64, 64))).astype(np.float32),
      "b": rng.normal(size=(64,)).astype(np.float32),
  }


def compute(out_path: str) -> None:
  import jax
  import jax.numpy as jnp

  d = jax.devices()[0]
  i = {k: jax.device_put(v, d) for k, v in inputs().items()}
  r = {"platform": np.array(d.platform), "device_kind": np.array(d.device_kind)}
  r["jit"] = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(0))(i["x"])
  r["grad"] = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(x) * x)))(i["x"])
  r["vmap"] = jax.jit(jax.vmap(lambda v, w: v @ w, in_axes=(0, None)))(i["xs"], i["w"])
  r["scan"] = jax.jit(lambda xs: jax.lax.scan(lambda c, v: (c + v, c + v), jnp.zeros(64), xs)[1])(i["xs"])
  key = jax.random.key(0) if hasattr(jax.random, "key") else jax.random.PRNGKey(0)
  r["random_bits"] = jax.jit(lambda k: jax.random.bits(k, (4096,), jnp.uint32))(key)
  r["random_normal"] = jax.jit(lambda k: jax.random.normal(k, (100000,)))(key)
  r["solve"] = jax.jit(jnp.linalg.solve)(i["spd"], i["b"])
  r["cholesky"] = jax.jit(jnp.linalg.cholesky)(i["spd"])
  r["eigvalsh"] = jax.jit(jnp.linalg.eigvalsh)(i["spd"])
  r["svdvals"] = jax.jit(lambda a: jnp.linalg.svd(a, compute_uv=False))(i["x"])
  for dt in DTYPES:
    x, w = i["x"].astype(dt), i["w"].astype(dt)
    r[f"matmul_{dt}"] = jax.jit(lambda a, b: a @ b)(x, w).astype(jnp.float32)
    r[f"exp_sum_{dt}"] = jax.jit(lambda a: jnp.exp(a).sum(1))(x).astype(jnp.float32)
  np.savez(out_path, **{k: np.asarray(v) for k, v in r.items()})


def rounded(a: np.ndarray, dtype: str) -> np.ndarray:
  """`a` rounded to `dtype` (bfloat16 through ml_dtypes, jax's own), as float64."""
  if dtype == "bfloat16":
    import ml_dtypes
    return a.astype(ml_dtypes.bfloat16).astype(np.float64)
  return a.astype(dtype).astype(np.float64)


def numpy_reference() -> dict[str, np.ndarray]:
  i = {k: v.astype(np.float64) for k, v in inputs().items()}
  want = {
      "jit": np.tanh(i["x"] @ i["x"].T).sum(0),
      "grad": np.cos(i["x"]) * i["x"] + np.sin(i["x"]),
      "vmap": i["xs"] @ i["w"],
      "scan": np.cumsum(i["xs"], axis=0),
      "solve": np.linalg.solve(i["spd"], i["b"]),
      "cholesky": np.linalg.cholesky(i["spd"]),
      "eigvalsh": np.linalg.eigvalsh(i["spd"]),
      "svdvals": np.linalg.svd(i["x"], compute_uv=False),
  }
  for dt in DTYPES:
    x, w = rounded(inputs()["x"], dt), rounded(inputs()["w"], dt)
    want[f"matmul_{dt}"] = x @ w
    want[f"exp_sum_{dt}"] = np.exp(x).sum(1)
  return want


def tolerance(key: str) -> float:
  for dt in DTYPES:
    if key.endswith(dt):
      return RTOL[dt]
  return RTOL["float32"]


def check_against_numpy(got) -> list[str]:
  """What disagrees with numpy beyond the tolerances (empty: all agree)."""
  problems = []
  for key, want in numpy_reference().items():
    g = np.asarray(got[key], np.float64)
    # Relative to the array's scale: elements near zero are judged by it.
    err = np.max(np.abs(g - want)) / max(np.max(np.abs(want)), 1e-30)
    if not np.all(np.isfinite(g)) or err > tolerance(key):
      problems.append(f"{key}: max error {err:.3g} relative to the array's scale > {tolerance(key)}")
  normal = np.asarray(got["random_normal"], np.float64)
  if abs(normal.mean()) > 0.02 or abs(normal.std() - 1) > 0.02:  # 100000 samples: 6 sigma
    problems.append(f"random_normal: mean {normal.mean():.4f}, std {normal.std():.4f}")
  if len(np.unique(np.asarray(got["random_bits"]))) < 4000:
    problems.append("random_bits: too many repeats for 4096 draws of 32 bits")
  return problems


def check_against_each_other(ours, theirs) -> list[str]:
  """What differs between two backends running the same XLA program:
  random bits exactly, the rest within the dtype's tolerance."""
  problems = []
  if not np.array_equal(ours["random_bits"], theirs["random_bits"]):
    problems.append("random_bits differ")
  for key in theirs.files if hasattr(theirs, "files") else theirs:
    if key in ("platform", "device_kind", "random_bits"):
      continue
    a, b = np.asarray(ours[key], np.float64), np.asarray(theirs[key], np.float64)
    if a.shape != b.shape:
      problems.append(f"{key}: shape {a.shape} != {b.shape}")
    elif np.max(np.abs(a - b)) > tolerance(key) * max(np.max(np.abs(b)), 1e-30):
      problems.append(f"{key}: max difference {np.max(np.abs(a - b)):.3g}")
  return problems


if __name__ == "__main__":
  compute(sys.argv[1])

"""jax features that need the plugin's help: donation, host callbacks (more in test_host_callbacks.py)."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def test_donation_deletes_buffer_without_warning():
  device = jax.devices("myplugin")[0]
  x = jax.device_put(np.arange(1024, dtype=np.float32), device)
  f = jax.jit(lambda v: v * 2 + 1, donate_argnums=0)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # "Some donated buffers were not usable" would fail here
    y = f(x)
  assert x.is_deleted()
  np.testing.assert_array_equal(np.asarray(y), np.arange(1024, dtype=np.float32) * 2 + 1)
  with pytest.raises(RuntimeError, match="deleted"):
    np.asarray(x)


def test_donation_reuses_memory():
  # Made by the engine, not by device_put: a host numpy array may be aliased
  # zero-copy, and memory that numpy owns can never be donated.
  with jax.default_device(jax.devices("myplugin")[0]):
    x = jax.jit(lambda: jnp.ones(1 << 16, jnp.float32))()
  before = x.unsafe_buffer_pointer()
  y = jax.jit(lambda v: v + 1, donate_argnums=0)(x)
  assert y.unsafe_buffer_pointer() == before


def test_host_callbacks_still_work_on_cpu():
  # The rules we install are for platform myplugin only.
  x = jax.device_put(np.float32(0.5), jax.devices("cpu")[0])
  out = jax.jit(lambda v: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(v.shape, v.dtype), v))(x)
  np.testing.assert_allclose(np.asarray(out), np.sin(0.5), rtol=1e-6)


@pytest.mark.parametrize("transform", ["eager", "jit", "vmap", "grad"])
def test_platform_dependent_takes_the_engines_branch(transform):
  """lax.platform_dependent picks a branch by platform name: on myplugin,
  the branch of its engine's platform (cpu), as on jax's CPU backend, unless
  the program gives myplugin one of its own."""
  def program(x):
    return jax.lax.platform_dependent(x, cpu=lambda v: jnp.sin(v) * 2.0, default=lambda v: v + 100.0)

  def own_branch(x):
    return jax.lax.platform_dependent(x, cpu=jnp.sin, myplugin=jnp.cos, default=lambda v: v + 100.0)

  run = {"eager": lambda f, x: f(x), "jit": lambda f, x: jax.jit(f)(x),
         "vmap": lambda f, x: jax.jit(jax.vmap(f))(x),
         "grad": lambda f, x: jax.jit(jax.vmap(jax.grad(f)))(x)}[transform]
  x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
  results = {}
  for platform in ("myplugin", "cpu"):
    with jax.default_device(jax.devices(platform)[0]):
      results[platform] = np.asarray(run(program, x)), np.asarray(run(own_branch, x))
  np.testing.assert_allclose(results["myplugin"][0], results["cpu"][0], rtol=1e-6)
  want = np.cos(x) if transform != "grad" else -np.sin(x)
  np.testing.assert_allclose(results["myplugin"][1], want, rtol=1e-6)


def test_an_export_for_the_engines_platform_runs_on_myplugin():
  """jax.export artifacts for cpu (the engine's platform), alone or among
  others, are called on myplugin, eagerly and inside a jit, with jax's CPU
  backend's results (jax offers a plugin no platform alias: it refused them);
  one for myplugin and cpu takes myplugin's lowering; one for other
  platforms only is refused with jax's words."""
  from jax import export

  spec = jax.ShapeDtypeStruct((3, 3), np.float32)
  a = (np.eye(3) * 4 + 1).astype(np.float32)
  for_cpu = export.export(jax.jit(lambda x: jnp.linalg.cholesky(x) * jnp.sin(x)), platforms=["cpu"])(spec)
  for_many = export.export(jax.jit(lambda x: x @ x + 1), platforms=["cuda", "cpu", "tpu"])(spec)
  results = {}
  for platform in ("myplugin", "cpu"):
    with jax.default_device(jax.devices(platform)[0]):
      results[platform] = [np.asarray(for_cpu.call(a)), np.asarray(jax.jit(lambda x: for_cpu.call(x) + 1)(a)),
                           np.asarray(for_many.call(a))]
  for ours, ref in zip(results["myplugin"], results["cpu"]):
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
  with jax.default_device(jax.devices("myplugin")[0]):
    both = export.export(jax.jit(lambda x: jax.lax.platform_dependent(x, cpu=lambda v: v + 1, myplugin=lambda v: v - 1)),
                         platforms=["cpu", "myplugin"])(spec)
    np.testing.assert_array_equal(np.asarray(both.call(a)), a - 1)
    tpu_only = export.export(jax.jit(lambda x: x + 1), platforms=["tpu"])(spec)
    with pytest.raises(ValueError, match=r"was exported for platforms '\('tpu',\)' but it is used on '\('myplugin',\)'"):
      tpu_only.call(a)

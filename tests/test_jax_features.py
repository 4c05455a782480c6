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

"""A program that calls myplugin_python_callback, with the persistent
compilation cache on: python cache_callback_program.py CACHE_DIR.

Where jax_plugin lowers Python host callbacks, jax.pure_callback makes the
call; before that, one of our own handlers registered under that name stands
in (the cache decides on the target name alone). Prints RESULT lines: the
value, and what serializing the executable directly said.
"""
import logging
import sys

import jax
import jax.numpy as jnp
import numpy as np

logging.basicConfig(level=logging.WARNING)
logging.getLogger("jax_plugin").setLevel(logging.DEBUG)
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)  # jax's own skip, for callbacks it knows of
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

x = jnp.arange(4.0)


def with_pure_callback(v):
  return jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1


def with_stand_in(v):
  return jax.ffi.ffi_call("myplugin_python_callback", jax.ShapeDtypeStruct(v.shape, v.dtype))(v) * 2 + 1


try:
  f = jax.jit(with_pure_callback)
  lowered = f.lower(x)
  assert "myplugin_python_callback" in lowered.as_text()
except NotImplementedError:
  from jax_plugin import _myplugin
  jax.ffi.register_ffi_target("myplugin_python_callback", _myplugin.ffi_targets()["myplugin_order_fence"],
                              platform="myplugin")
  f = jax.jit(with_stand_in)
  lowered = f.lower(x)
compiled = lowered.compile()
print("RESULT value", [float(v) for v in np.asarray(compiled(x))], flush=True)
backend = jax.devices()[0].client
try:
  backend.serialize_executable(compiled.runtime_executable())
  print("RESULT serialize ok", flush=True)
except Exception as e:  # noqa: BLE001
  print("RESULT serialize", type(e).__name__, e, flush=True)

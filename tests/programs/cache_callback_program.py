"""A program that calls a Python host callback, with the persistent
compilation cache on: python cache_callback_program.py CACHE_DIR. Prints
RESULT lines: the value, and what serializing the executable directly said.
"""
import logging
import sys

import jax
import jax.numpy as jnp
import numpy as np

logging.basicConfig(level=logging.WARNING)
logging.getLogger("jax_plugin").setLevel(logging.DEBUG)
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)  # jax's own skip of host callbacks
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

x = jnp.arange(4.0)


def with_pure_callback(v):
  return jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1


compiled = jax.jit(with_pure_callback).lower(x).compile()
print("RESULT value", [float(v) for v in np.asarray(compiled(x))], flush=True)
backend = jax.devices()[0].client
try:
  backend.serialize_executable(compiled.runtime_executable())
  print("RESULT serialize ok", flush=True)
except Exception as e:  # noqa: BLE001
  print("RESULT serialize", type(e).__name__, e, flush=True)

"""Runs Python host callbacks on the default backend and prints which of
jax's configuration values changed since the program started (after its own
update or initialize call, when it makes one).

  config_untouched.py env|update|initialize
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

mode = sys.argv[1]
if mode == "update":
  jax.config.update("jax_platforms", "myplugin")
if mode == "initialize":
  jax.distributed.initialize()
before = dict(jax.config.values)


@jax.jit
def f(v):
  jax.debug.print("sum {}", v.sum())
  return jax.pure_callback(lambda a: np.cos(a), jax.ShapeDtypeStruct(v.shape, v.dtype), v) * 2


out = np.asarray(f(jnp.arange(3.0))).round(5).tolist()
jax.effects_barrier()
after = dict(jax.config.values)
changed = {k: [str(before.get(k)), str(after.get(k))] for k in sorted(set(before) | set(after))
           if before.get(k) != after.get(k)}
print("RESULT " + json.dumps({"changed": changed, "default": jax.default_backend(), "out": out}), flush=True)

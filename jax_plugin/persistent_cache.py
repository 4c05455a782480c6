"""jax's persistent compilation cache on myplugin.

jax decides in `compilation_cache.is_cache_used(backend)` whether to use its
cache at all, and only for backends whose `platform` is in a list written
inside that function ("tpu", "gpu", "cpu", "neuron"); for any other plugin
the cache is silently off. There is no list to extend, so `enable()` wraps
that one function in jax's module: for a myplugin backend it asks jax's own
function about a stand-in that reports platform "cpu" (the rest of jax's
logic, its one-time check and its metrics, stay jax's). Nothing else in jax
changes: keys, thresholds, reads and writes are jax's, and our PJRT layer
serializes and loads the executables (plugin/pjrt/executable.cc), with the
plugin's build in the platform version that jax puts into every key.

A program that calls a Python host callback names a callable of this
process only, and a multi-process program with no device here has nothing
to keep: neither is written (a debug log line says why). jax itself already
skips programs whose lowering handed it host callbacks, as ours does.
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger("jax_plugin")

_MARK = "_myplugin_cache_hook"


class _AsCachePlatform:
  """What jax's is_cache_used reads of a backend, with a platform it accepts."""

  platform = "cpu"

  def __init__(self, backend):
    self.supports_executable_serialization = getattr(backend, "supports_executable_serialization", True)


def enable(platform: str) -> bool:
  """Lets jax's persistent compilation cache serve `platform`. Returns
  whether the hooks are in place (False on a jax without these functions:
  the cache then stays off, as before)."""
  from jax._src import compilation_cache as cc

  is_cache_used = getattr(cc, "is_cache_used", None)
  put = getattr(cc, "put_executable_and_time", None)
  if not callable(is_cache_used) or not callable(put):
    logger.debug("myplugin: this jax has no compilation_cache.is_cache_used/put_executable_and_time; "
                 "the persistent compilation cache stays off for myplugin")
    return False
  if getattr(is_cache_used, _MARK, False):
    return True

  @functools.wraps(is_cache_used)
  def is_cache_used_for_plugin(backend, *args, **kwargs):
    if getattr(backend, "platform", None) == platform:
      backend = _AsCachePlatform(backend)
    return is_cache_used(backend, *args, **kwargs)

  @functools.wraps(put)
  def put_unless_process_local(cache_key, module_name, executable, backend, *args, **kwargs):
    if getattr(backend, "platform", None) == platform:
      reason = _not_cacheable(executable)
      if reason is not None:
        logger.debug("Not writing persistent cache entry for '%s' because %s", module_name, reason)
        return None
    return put(cache_key, module_name, executable, backend, *args, **kwargs)

  setattr(is_cache_used_for_plugin, _MARK, True)
  setattr(put_unless_process_local, _MARK, True)
  cc.is_cache_used = is_cache_used_for_plugin
  cc.put_executable_and_time = put_unless_process_local
  return True


def _not_cacheable(executable) -> str | None:
  """Why jax should not write this executable (our serializer refuses both
  cases too, but jax would report that as a warning)."""
  local_devices = getattr(executable, "local_devices", None)
  if callable(local_devices) and not local_devices():
    # A multi-process program with no device here: its entry, under jax's
    # one key for every process, would keep the processes that run it from
    # writing theirs.
    return "it has no device on this process"
  try:
    texts = [m.to_string() for m in executable.hlo_modules()]
  except Exception as e:
    logger.debug("myplugin: cannot read the compiled program to check it for host callbacks: %s", e)
    return None
  # Custom calls whose attributes name callables of this process (the C++
  # serializer refuses them too: plugin/pjrt/host_callback_targets.h).
  from jax_plugin import callbacks
  for target in callbacks.targets().values():
    if any(f'custom_call_target="{target}"' in t for t in texts):
      return f"it calls {target} (a Python host callback of this process)"
  return None

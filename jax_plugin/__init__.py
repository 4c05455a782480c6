"""myplugin: a PJRT backend for JAX over a real XLA engine.

jax imports this package through the ``jax_plugins`` entry point and calls
:func:`initialize`. Select the backend with ``JAX_PLATFORMS=myplugin``.
"""

from __future__ import annotations

from jax_plugin._version import __version__

__all__ = ["PLATFORM", "__version__", "engine_path", "initialize", "library_path"]


def __getattr__(name):
  # Lazily: the startup hook (myplugin-cluster.pth) imports this package in
  # every interpreter, which must stay cheap.
  if name in ("PLATFORM", "engine_path", "initialize", "library_path"):
    from jax_plugin import registration
    return getattr(registration, name)
  raise AttributeError(f"module 'jax_plugin' has no attribute {name!r}")

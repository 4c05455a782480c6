"""myplugin: a PJRT backend for JAX over a real XLA engine.

jax imports this package through the ``jax_plugins`` entry point and calls
:func:`initialize`. Select the backend with ``JAX_PLATFORMS=myplugin``.
"""

from __future__ import annotations

from jax_plugin._version import __version__
from jax_plugin.registration import PLATFORM, engine_path, initialize, library_path

__all__ = ["PLATFORM", "__version__", "engine_path", "initialize", "library_path"]


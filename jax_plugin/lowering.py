"""How jax lowers programs for platform "myplugin".

The engine is XLA's CPU compiler, so a program for myplugin is lowered
exactly as for "cpu": the same platform-specific rules (LAPACK custom calls,
CPU-tuned convolutions, threefry) and the same LAPACK FFI handlers, which
we register into the engine. Python host callbacks are the exception: jax
emits them only for its own clients, so jax_plugin.callbacks serves them.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("jax_plugin")

PLATFORM = "myplugin"

def enable_donation() -> None:
  """jax donates buffers only on the platforms of a hard-coded list."""
  from jax._src.interpreters import mlir

  platforms = getattr(mlir, "_platforms_with_donation", None)
  if platforms is None:
    logger.warning("myplugin: this jax has no _platforms_with_donation; donation stays as jax decides")
  elif PLATFORM not in platforms:
    platforms.append(PLATFORM)


def install_lowering_rules(engine_kind: str = "cpu") -> None:
  """jax's rules for the engine's own platform ("cpu" or "cuda") serve myplugin."""
  from jax._src.interpreters import mlir

  rules = getattr(mlir, "_platform_specific_lowerings", None)
  if rules is None:
    raise RuntimeError("this jax keeps no per-platform lowering rules; myplugin cannot lower for its engine")
  for prim, rule in rules.get(engine_kind, {}).items():
    rules[PLATFORM].setdefault(prim, rule)
  from jax_plugin import callbacks
  callbacks.install(engine_kind)


def register_collective_targets(engine_kind: str = "cpu") -> None:
  """Our collectives' FFI handlers (myplugin_all_reduce, …), for compiled
  programs: host memory and Gloo on the CPU engine, NCCL on the CUDA one."""
  import jax
  from jax_plugin import _myplugin
  targets = _myplugin.ffi_targets()
  if engine_kind == "cuda":
    nccl = _myplugin.nccl_ffi_targets()
    if nccl is None:
      raise RuntimeError("this myplugin was built without NCCL's headers, so it cannot run collectives on GPUs: "
                         "reinstall with pip install 'myplugin[cuda12]'")
    # The host handlers read and write host memory: none of them serves the GPU.
    targets = nccl
  for name, capsule in targets.items():
    jax.ffi.register_ffi_target(name, capsule, platform=PLATFORM)


def register_lapack_targets(c_api) -> None:
  """Registers jaxlib's LAPACK FFI handlers (the ones jnp.linalg calls on CPU) in the engine."""
  from jax_plugin import _myplugin
  try:
    from jaxlib import lapack
  except ImportError as e:
    logger.warning("myplugin: jaxlib has no LAPACK module (%s); jnp.linalg decompositions will fail", e)
    return
  lapack._lapack.initialize()
  for name, capsule, api_version in lapack.registrations().get("cpu", []):
    if api_version != 1:
      continue  # legacy custom calls: jax no longer emits them
    _myplugin.register_custom_call_target(c_api, name, capsule, PLATFORM, 1, 0)

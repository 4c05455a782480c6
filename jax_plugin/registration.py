"""Registration of the plugin with jax: the PJRT library, the custom-call
handler, donation, and the lowering rules that jax keeps per platform.

Everything here runs once, inside jax's plugin discovery. A failure is
logged at warning level with its cause (jax itself would only log it at
debug level and then call the platform unknown) and then re-raised.
"""

from __future__ import annotations

import functools
import logging
import os

logger = logging.getLogger("jax_plugin")

PLATFORM = "myplugin"
_LIBRARY_NAME = "libmyplugin_pjrt.so"

_c_api = None


def library_path() -> str:
  """Path of the PJRT plugin library that this package installs."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)


def engine_path() -> str | None:
  """The XLA engine library that myplugin would load here (see engine_selection)."""
  from jax_plugin import engine_selection
  return engine_selection.select().path


def c_api():
  """The PJRT_Api capsule of the registered plugin (None before initialize)."""
  return _c_api


def initialize() -> None:
  """Called by jax's plugin discovery."""
  try:
    _initialize()
  except Exception as e:
    logger.warning("myplugin: initialization failed, the 'myplugin' backend will not be available: %s", e)
    raise


def _initialize() -> None:
  global _c_api
  if _c_api is not None:
    return
  from jax._src import xla_bridge
  from jax_plugin import compatibility

  compatibility.check(compatibility.installed_versions())
  lib = library_path()
  if not os.path.exists(lib):
    raise RuntimeError(f"the myplugin PJRT library is missing: {lib} (reinstall the package)")
  from jax_plugin import _myplugin, engine_selection, variables
  variables.warn_unknown()
  engine = engine_selection.select()
  kind = engine.kind
  nccl = engine_selection.nccl_library() if kind == "cuda" else None
  if engine.path is None:
    logger.warning("myplugin: no XLA engine found: reinstall myplugin (its wheel ships the CPU engine) or set MYPLUGIN_ENGINE")
  else:
    logger.info("myplugin: engine %s (%s): %s", engine.kind, engine.reason, engine.path)
  # The PJRT library loads these when it first needs them (plugin
  # initialization, FFI registration): before register_plugin.
  _myplugin.set_library_choice(engine_path=engine.path or "", engine_kind=kind,
                               shadow_engine_path=engine_selection.shadow_engine() or "",
                               nccl_library=nccl or "",
                               compile_engine_path=engine_selection.compile_engine() or "")

  # jax warns that every plugin outside this list is "experimental"; myplugin
  # is tested against jax's CPU backend, so it asks to be left out of that.
  nonexperimental = getattr(xla_bridge, "_nonexperimental_plugins", None)
  if isinstance(nonexperimental, (set, list)) and PLATFORM not in nonexperimental:
    nonexperimental.add(PLATFORM) if isinstance(nonexperimental, set) else nonexperimental.append(PLATFORM)

  # jax calls this right before it creates our client, which is where a
  # multi-process job must join our coordination service. (Being callable,
  # not None, also makes jax pass jax_pjrt_client_create_options when
  # jax.distributed is initialized.)
  _c_api = xla_bridge.register_plugin(PLATFORM, library_path=lib, options=_client_options)
  if _c_api is None:
    raise RuntimeError("jax refused to register the myplugin PJRT library (see jax's log)")

  from jax_plugin import cost_analysis, lowering
  from jax_plugin.spmd import compile_hooks
  _install_custom_call_handler(_c_api)
  _myplugin.set_program_hooks(compile_hooks.shadow_program, compile_hooks.local_program,
                              compile_hooks.UnsupportedProgram)
  _myplugin.set_cost_analysis_hook(cost_analysis.analyze)
  lowering.enable_donation()
  from jax_plugin import dlpack
  dlpack.install(kind, _c_api)
  from jax_plugin import persistent_cache
  persistent_cache.enable(PLATFORM)
  lowering.install_lowering_rules(kind)
  lowering.follow_engine_lowering_rules(kind)
  lowering.register_collective_targets(kind)
  if kind == "cpu":
    # An FFI version pair nobody has shown to work stops the start here.
    jaxlib_targets = lowering.jaxlib_cpu_targets()
    compatibility.check_ffi(jaxlib_targets, f"{engine.release or 'engine'} at {engine.path}")
    try:
      lowering.register_jaxlib_cpu_targets(_c_api, jaxlib_targets)
    except Exception as e:  # the backend itself may still work; say what is lost
      logger.warning("myplugin: jaxlib's CPU FFI handlers (LAPACK, sparse, dce_sink) will not run: %s", e)


def _client_options() -> dict:
  """Joins the job before the client exists: from MYPLUGIN_* variables (the
  launcher's), or through jax.distributed's key-value store when jax's own
  service runs the job. Our client gets no node_id/num_nodes: it reads the
  job from our runtime (and jax's client, if any, is never handed to it),
  and the local devices this process registered with it."""
  from jax._src import distributed as jax_distributed
  from jax._src import xla_bridge
  from jax_plugin import distributed, jax_client

  with jax_client.backend_init():
    if not distributed.is_initialized():
      if not distributed.initialize_from_environment():
        state = jax_distributed.global_state
        if state.client is not None and not jax_client.is_ours(state.client) and (state.num_processes or 1) > 1:
          distributed.initialize_through_jax(state)
  distributed.finish_dispatched_work_at_exit()
  options = distributed.client_options()
  visible = os.environ.get("MYPLUGIN_VISIBLE_DEVICES", "").strip()
  if visible and "visible_devices" not in options:
    # The user's choice of GPUs (CUDA ordinals, as CUDA_VISIBLE_DEVICES counts them).
    options["visible_devices"] = [int(i) for i in visible.split(",") if i.strip()]
  # jax's distributed state gets our client once the backend exists (it
  # must not see it while jaxlib creates the backend).
  hooks = getattr(xla_bridge, "_backend_initialization_hooks", None)
  if isinstance(hooks, list) and _sync_after_backend_init not in hooks:
    hooks.append(_sync_after_backend_init)
  return options


def _sync_after_backend_init(backend) -> None:
  from jax_plugin import jax_client
  jax_client.sync()


def _install_custom_call_handler(capsule) -> None:
  from jax._src.lib import xla_client
  from jax_plugin import _myplugin

  xla_client.register_custom_call_handler(
      PLATFORM, functools.partial(_myplugin.register_custom_call_target, capsule))

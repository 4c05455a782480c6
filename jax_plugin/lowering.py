"""How jax lowers programs for platform "myplugin".

The engine is XLA's CPU compiler, so a program for myplugin is lowered
exactly as for "cpu": the same platform-specific rules (LAPACK custom calls,
CPU-tuned convolutions, threefry) and the same FFI handlers (every one that
jaxlib has for its CPU backend), which we register into the engine. Python
host callbacks are the exception: jax emits them only for its own clients,
so jax_plugin.callbacks serves them.
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger("jax_plugin")

PLATFORM = "myplugin"
_HOST = "Host"  # XLA's name for the CPU platform of its FFI registry

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
  for prim in list(rules.get(engine_kind, {})):
    rules[PLATFORM].setdefault(prim, _for_target(prim, engine_kind))
  _install_platform_branches(engine_kind)
  from jax_plugin import buffer_callbacks, callbacks
  callbacks.install(engine_kind)
  buffer_callbacks.install(engine_kind)
  _accept_engine_exports(engine_kind)


def _accept_engine_exports(engine_kind: str) -> None:
  """A `jax.export` artifact exported for the engine's own platform ("cpu",
  or "cuda" on the CUDA engine) is called on myplugin: jax checks that the
  platform it lowers for is among the artifact's, and offers a plugin no
  alias, so an Exported for cpu was refused ("was exported for platforms
  ('cpu',) but it is used on ('myplugin',)"). Its module is what the engine
  compiles from a program of that platform, with the same rules myplugin's
  lowering takes (install_lowering_rules above), so myplugin's lowering of
  the call treats the engine's platform as its own. An artifact that names
  myplugin keeps its myplugin lowering; any other is refused as jax refuses it."""
  from jax._src.export import _export
  from jax._src.interpreters import mlir

  prim = getattr(_export, "call_exported_p", None)
  rule = getattr(_export, "_call_exported_lowering", None)
  if prim is None or rule is None:
    logger.warning("myplugin: this jax has no call_exported lowering; Exported artifacts for %s stay refused",
                   engine_kind)
    return

  def lowering(ctx, *args, exported, **params):
    if not (ctx.module_context.platforms == (PLATFORM,) and PLATFORM not in exported.platforms and
            engine_kind in exported.platforms):
      return rule(ctx, *args, exported=exported, **params)
    as_engine = ctx.replace(module_context=ctx.module_context.replace(platforms=(engine_kind,)))
    out = rule(as_engine, *args, exported=exported, **params)
    if as_engine.tokens_out is not None:  # an artifact with ordered effects threads its tokens
      ctx.set_tokens_out(as_engine.tokens_out)
    return out

  mlir.register_lowering(prim, lowering, platform=PLATFORM)


def _with_myplugin_beside(branches_platforms, platform: str):
  """`lax.platform_dependent`'s branches (a tuple of platform-name tuples,
  None for the default) with myplugin beside `platform`, the engine's, unless
  a branch names myplugin itself."""
  if branches_platforms is None or any(ps is not None and PLATFORM in ps for ps in branches_platforms):
    return branches_platforms
  return tuple(ps if ps is None or platform not in ps else (*ps, PLATFORM) for ps in branches_platforms)


def _install_platform_branches(engine_kind: str) -> None:
  """`lax.platform_dependent(x, cpu=f, default=g)` (jax's own code uses it
  too) picks its branch by the lowering platform's name, and myplugin's is
  not "cpu": g would run where jax's CPU backend runs f. On myplugin the
  engine's platform's branch is taken, unless the program gives myplugin a
  branch of its own. Both of jax's rules that read the branches (the index,
  and the conditional that keeps the chosen branch) see the same names."""
  from jax._src.interpreters import mlir
  from jax._src.lax.control_flow import conditionals

  index_p = getattr(conditionals, "platform_index_p", None)
  if index_p is None or index_p not in mlir._lowerings or conditionals.cond_p not in mlir._lowerings:
    raise RuntimeError("this jax has no platform_index primitive; myplugin cannot lower lax.platform_dependent")
  index_rule = mlir._lowerings[index_p].rule
  cond_rule = mlir._lowerings[conditionals.cond_p].rule

  def platform(ctx) -> str:
    return "cuda" if _lowers_for_gpu_target(ctx) else engine_kind

  def index(ctx, *args, platforms, **params):
    return index_rule(ctx, *args, platforms=_with_myplugin_beside(platforms, platform(ctx)), **params)

  def cond(ctx, *args, **params):
    if params.get("branches_platforms") is not None:
      params["branches_platforms"] = _with_myplugin_beside(params["branches_platforms"], platform(ctx))
    return cond_rule(ctx, *args, **params)

  mlir.register_lowering(index_p, index, platform=PLATFORM)
  mlir.register_lowering(conditionals.cond_p, cond, platform=PLATFORM)


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
                         "reinstall it without -C cmake.define.MYPLUGIN_NCCL=OFF")
    # The host handlers read and write host memory: none of them serves the GPU.
    targets = nccl
  for name, capsule in targets.items():
    jax.ffi.register_ffi_target(name, capsule, platform=PLATFORM)


def jaxlib_cpu_targets() -> dict:
  """Every typed FFI handler that jaxlib has for its own CPU backend, by name.

  Found by enumeration, in three places: jaxlib's FFI registry for XLA's
  host platform (`_jax.custom_call_targets("Host")`: handlers jaxlib
  registers itself, such as dce_sink, and those jax registered for "cpu"
  while its CPU backend existed); the registrations for "cpu" that jax holds
  back until its CPU backend exists (all of them under
  JAX_PLATFORMS=myplugin); and the `registrations()["cpu"]` of every jaxlib
  module already imported (LAPACK, CPU sparse), which jax registers only
  when it first needs them.
  """
  import sys
  from jax._src import lib
  from jax._src.lib import xla_client

  targets: dict = {}
  registry = getattr(getattr(lib, "_jax", None), "custom_call_targets", None)
  if registry is None:
    logger.warning("myplugin: this jaxlib does not list its FFI registry; only its modules' targets are registered")
  else:
    targets.update(registry(_HOST))
  for entry in list((getattr(xla_client, "_custom_callback", None) or {}).get(_HOST, [])):
    if len(entry) >= 3 and entry[2] == 1:  # (name, fn, api_version, traits)
      targets.setdefault(entry[0], entry[1])
  lapack = sys.modules.get("jaxlib.lapack")
  if lapack is not None and hasattr(getattr(lapack, "_lapack", None), "initialize"):
    lapack._lapack.initialize()  # binds the LAPACK routines its handlers call
  for name, module in sorted(list(sys.modules.items())):
    if not name.startswith("jaxlib.") or not callable(getattr(module, "registrations", None)):
      continue
    try:
      cpu = module.registrations().get("cpu", [])
    except Exception as e:  # one module's failure must not cost the others
      logger.warning("myplugin: %s.registrations() failed: %s", name, e)
      continue
    # The Python modules list (name, handler, api_version) per platform; their
    # C extensions (jaxlib.cpu._lapack) map names to handlers and have no "cpu".
    if not isinstance(cpu, (list, tuple)):
      continue
    for entry in cpu:
      if isinstance(entry, tuple) and len(entry) == 3 and entry[2] == 1:  # typed FFI only: jax emits no other
        targets.setdefault(entry[0], entry[1])
  return targets


def _register(c_api, name, fn) -> bool:
  from jax_plugin import _myplugin
  try:
    _myplugin.register_custom_call_target(c_api, name, fn, PLATFORM, 1, 0)
  except (ValueError, TypeError, RuntimeError) as e:  # one bad target must not cost the others
    logger.warning("myplugin: the CPU FFI target %s is not available on myplugin: %s", name, e)
    return False
  return True


def register_jaxlib_cpu_targets(c_api, targets: dict | None = None) -> list[str]:
  """Registers jaxlib's CPU FFI handlers (`targets`, else jaxlib_cpu_targets()) in the engine,
  so that what jax lowers for "cpu" also runs on myplugin, and follows every
  typed target registered for "cpu" from now on (a program's own
  `jax.ffi.register_ffi_target(..., platform="cpu")`, a jax module imported
  later). Returns the names registered now."""
  _follow_cpu_registrations(c_api)
  targets = jaxlib_cpu_targets() if targets is None else targets
  return [name for name, fn in targets.items() if name not in _served_by_myplugin() and _register(c_api, name, fn)]


def _served_by_myplugin() -> set[str]:
  """Names whose handler in the engine is myplugin's own: jaxlib's handler
  under the same name would collide with it (Python host callbacks read
  state that only jax's own CPU client supplies)."""
  from jax_plugin import callbacks
  return set(callbacks.targets().values())


def _follow_cpu_registrations(c_api) -> None:
  # jax.ffi.register_ffi_target calls xla_client.register_custom_call_target
  # by attribute, and jax offers no other way to learn of a "cpu" target.
  from jax._src.lib import xla_client

  register = getattr(xla_client, "register_custom_call_target", None)
  if register is None or getattr(register, "_myplugin_follows", False):
    return
  names = getattr(xla_client, "xla_platform_names", {})

  @functools.wraps(register)
  def follow(name, fn, platform="cpu", api_version=0, *args, **kwargs):
    result = register(name, fn, platform, api_version, *args, **kwargs)
    if names.get(platform, platform) == _HOST and name not in _served_by_myplugin():
      if api_version == 1:
        _register(c_api, name, fn)
      else:
        logger.warning("myplugin: custom call target %s uses the untyped custom-call API (api_version=%s); "
                       "myplugin runs typed XLA FFI handlers only, so it will not run there", name, api_version)
    return result

  follow._myplugin_follows = True
  xla_client.register_custom_call_target = follow


# In the platform version of myplugin's compile-only GPU topologies
# (plugin/pjrt/gpu_compile.cc, TargetWriter), which jax's compile-only
# backend reports.
_GPU_TARGET = "for XLA's CUDA engine"


def _lowers_for_gpu_target(ctx) -> bool:
  backend = getattr(getattr(ctx, "module_context", None), "backend", None)
  return _GPU_TARGET in (getattr(backend, "platform_version", "") or "")


def _for_target(prim, engine_kind: str):
  """The lowering rule of `prim` for myplugin: the engine platform's, but
  "cuda"'s when the program is compiled for a GPU topology of myplugin on a
  machine whose engine is the CPU one; jax's default rule where the chosen
  platform has none. Chosen per lowering: one process lowers for both."""
  from jax._src.interpreters import mlir

  rules = mlir._platform_specific_lowerings
  entry = rules[engine_kind].get(prim)
  if engine_kind == "cuda":
    return entry

  def rule(ctx, *args, **params):
    platform = "cuda" if _lowers_for_gpu_target(ctx) else engine_kind
    chosen = rules[platform].get(prim) or mlir._lowerings.get(prim)
    if chosen is None:
      raise NotImplementedError(f"myplugin has no lowering of {prim} for {platform}")
    return chosen.rule(ctx, *args, **params)
  return mlir.LoweringRuleEntry(rule, entry.inline if entry is not None else True)


# Primitives whose one generic rule picks its lowering from the platform's
# name itself: pallas_call (mlir.lower_per_platform with "cpu" and "cuda"
# keys and no default) lowers to Triton or Mosaic GPU for "cuda" and refuses
# compiled mode on "cpu" ("Only interpret mode is supported on CPU
# backend"); mpmd_map (Mosaic GPU's plgpu.kernel) matches the module's
# platform. On myplugin the rule runs as if the lowering platform were the
# engine's, or "cuda" for a GPU target: jax's own behaviour there, errors
# included.
_PER_PLATFORM_PRIMITIVES = frozenset({"pallas_call", "mpmd_map"})


def _as_engine_platform(prim, engine_kind: str):
  from jax._src.interpreters import mlir

  generic = mlir._lowerings[prim]

  def rule(ctx, *args, **params):
    target = _lowers_for_gpu_target(ctx)
    platform = "cuda" if engine_kind == "cuda" or target else engine_kind
    ctx = ctx.replace(platforms=(platform,),
                      module_context=ctx.module_context.replace(platforms=(platform,)))
    if not target:
      return generic.rule(ctx, *args, **params)
    with _target_gpu_as_abstract_device(ctx):
      return generic.rule(ctx, *args, **params)
  return mlir.LoweringRuleEntry(rule, generic.inline)


def _target_gpu_as_abstract_device(ctx):
  """A kernel for a compile-only GPU topology is built for its GPU: jax's
  Pallas reads the GPU (its compute capability) from the abstract mesh's
  device, else from the default device, which on this machine is no GPU
  (jax's own CUDA backend then asks the user for an abstract mesh). The
  target's devices say which GPU it is."""
  import contextlib
  from jax._src import mesh as mesh_lib

  current = mesh_lib.get_abstract_mesh()
  device = next(iter(ctx.module_context.backend.devices()), None)
  if device is None or getattr(current, "abstract_device", None) is not None:
    return contextlib.nullcontext()
  abstract_device = mesh_lib.AbstractDevice(device_kind=device.device_kind, num_cores=None, platform="gpu")
  return mesh_lib.use_abstract_mesh(current.update(abstract_device=abstract_device))


class _FollowingRules(dict):
  """myplugin's own lowering rules, then the engine platform's (or, for a
  compile-only GPU topology, "cuda"'s: _for_target), looked up at lowering
  time: a "cpu" rule that jax registers after start-up (importing
  jax.experimental.sparse late) serves myplugin too."""

  def __init__(self, own: dict, engine_kind: str, rules: dict):
    super().__init__(own)
    self._engine_kind = engine_kind
    self._rules = rules

  def __contains__(self, prim) -> bool:
    return (dict.__contains__(self, prim) or prim in self._rules[self._engine_kind] or
            prim in self._rules.get("cuda", {}) or _is_per_platform(prim))

  def __missing__(self, prim):
    if _is_per_platform(prim) and prim not in self._rules[self._engine_kind]:
      return _as_engine_platform(prim, self._engine_kind)
    return _for_target(prim, self._engine_kind)

  def get(self, prim, default=None):
    return self[prim] if prim in self else default


def _is_per_platform(prim) -> bool:
  from jax._src.interpreters import mlir
  return getattr(prim, "name", None) in _PER_PLATFORM_PRIMITIVES and prim in mlir._lowerings


def follow_engine_lowering_rules(engine_kind: str = "cpu") -> None:
  """Makes jax's rules for the engine's platform, present and future, serve
  myplugin wherever myplugin has no rule of its own."""
  from jax._src.interpreters import mlir

  rules = getattr(mlir, "_platform_specific_lowerings", None)
  if rules is None or isinstance(rules.get(PLATFORM), _FollowingRules):
    return
  rules[PLATFORM] = _FollowingRules(rules.get(PLATFORM, {}), engine_kind, rules)

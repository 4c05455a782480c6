"""Python host callbacks (jax.pure_callback, io_callback, jax.debug.print,
jax.debug.callback, checkify) on myplugin.

jax lowers every one of them through `jax._src.callback.emit_python_callback`,
which refuses platforms outside cpu/cuda/rocm/tpu and emits a custom call that
only jaxlib's own clients can serve (their handler finds the callables in
execute-context data that a plugin client never gets). So for platform
"myplugin" that function is replaced by `emit`, which keeps jax's checks and
token handling and emits a typed-FFI call whose attribute `callback_id` names
a `HostCallback` in this module's registry. The FFI handler
(plugin/python/host_callback.cc) takes the GIL and calls `_dispatch`.

The call keeps jax's target name (`xla_ffi_python_cpu_callback`, on the CUDA
engine too: plugin/pjrt/host_callback_targets.h says why), with our handler
registered under it in the engine:
XLA's Shardy export recognizes Python callbacks by these names alone
(xla/service/spmd/shardy/utils.cc, isPythonCallbackCustomCall) and otherwise
drops the sharding of a callback without results, which the SPMD
partitioner then refuses ("Side-effect HLO must have sharding"). The
attribute differs from jaxlib's (`index`), so jaxlib's own handler could
never run such a program by mistake.

Lifetime: the `HostCallback` is also appended to jax's `host_callbacks` of the
module, which jax hands to the compile and jaxlib keeps with the executable;
the registry holds only a weak reference, so a callback lives exactly as long
as the lowering or executable that can call it. Being in `host_callbacks` also
keeps such programs out of jax's persistent compilation cache (jax writes no
entry for a program with host callbacks), so no other process can load a
program whose `callback_id` means nothing there.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import secrets
import weakref

import numpy as np

logger = logging.getLogger("jax_plugin")

PLATFORM = "myplugin"
_target: str | None = None  # the target name this engine's handler is registered under

# No lock: single dict operations are atomic under the GIL, and a lock taken
# here could deadlock when garbage collection runs `forget` inside it.
_registry: dict[int, weakref.ref] = {}
# Ids carry a random per-process prefix, so that a program that reaches
# another process anyway (a serialized executable) cannot name one of that
# process's callbacks: it fails with "no longer exists" instead.
_ids = itertools.count((secrets.randbits(31) + 1) << 32)


def new_id() -> int:
  """A callback id no other callback of this process has (buffer callbacks' too)."""
  return next(_ids)
_jax_emit = None  # jax's emit_python_callback, for every other platform
_unavailable: str | None = None  # why this engine cannot run callbacks, if it cannot
# Why partitioned=True callbacks in a partitioned jit cannot run, if they cannot.
_partitioned_unavailable: str | None = "myplugin's callbacks are not installed"


def targets() -> dict[str, str]:
  """The custom-call target names of Python host callbacks by engine kind:
  jax's own names (Shardy recognises a callback only by its name), defined
  once, in plugin/pjrt/host_callback_targets.h."""
  from jax_plugin import _myplugin
  return dict(_myplugin.host_callback_targets())


class HostCallback:
  """A lowered callback: the checked callable and the types of its operands
  (the results are checked by the callable and sized by the handler).

  Called by the handler with one bytearray per operand (None for a token)
  and their dimensions; returns one uint8 view per result, in the result's
  row-major layout.
  """

  def __init__(self, fn, operand_avals):
    self.fn = fn
    self.operands = [(tuple(a.shape), np.dtype(a.dtype), _packed_bits(a.dtype)) for a in operand_avals]
    self.id = new_id()
    key = self.id

    def forget(_, key=key):
      _registry.pop(key, None)

    _registry[key] = weakref.ref(self, forget)

  def __call__(self, *args):
    return self.fn(*args)

  def run(self, raw, dims=None):
    """`dims`: each operand's dimensions as the engine has them (a
    partitioned=True callback gets its shard, not the lowered shape)."""
    operands = iter(self.operands)
    args = []
    for i, r in enumerate(raw):
      if r is None:
        continue  # a token: ordering only, nothing to pass
      shape, dtype, bits = next(operands)
      if dims is not None:
        shape = tuple(dims[i])
      if 0 in shape:
        args.append(np.zeros(shape, dtype))
      elif bits:
        args.append(_unpack(r, bits, int(np.prod(shape))).view(dtype).reshape(shape))
      else:
        args.append(np.frombuffer(r, dtype=dtype).reshape(shape))
    outs = self.fn(*args)
    return [_pack(o, bits) if (bits := _packed_bits(np.asarray(o).dtype)) else
            np.ascontiguousarray(o).reshape(-1).view(np.uint8) for o in outs]


# Sub-byte types (int4, uint4, int2, uint2, float4): the engine packs 8 / bits
# elements into each byte of its buffer, the first in the lowest bits, in a
# buffer of one byte per element (the rest unused); numpy (ml_dtypes) keeps
# one element per byte, in its low bits. As jaxlib's own CPU callback does,
# operands are unpacked and results packed. Without this the callback saw
# and returned wrong numbers, silently.
def _packed_bits(dtype) -> int:
  """Bits per element of a type the engine packs, else 0."""
  from jax._src import dtypes
  bits = dtypes.itemsize_bits(np.dtype(dtype))
  return bits if bits < 8 and np.dtype(dtype) != np.bool_ else 0


def _unpack(raw, bits: int, count: int) -> np.ndarray:
  per = 8 // bits
  packed = np.frombuffer(raw, np.uint8, count=-(-count // per))
  shifts = np.arange(per, dtype=np.uint8) * np.uint8(bits)
  return ((packed[:, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(-1)[:count]


def _pack(out, bits: int) -> np.ndarray:
  per = 8 // bits
  values = np.ascontiguousarray(out).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
  padded = np.zeros(-(-values.size // per) * per, np.uint8)
  padded[:values.size] = values
  shifts = np.arange(per, dtype=np.uint8) * np.uint8(bits)
  packed = np.bitwise_or.reduce(padded.reshape(-1, per) << shifts, axis=1).astype(np.uint8)
  buffer = np.zeros(values.size, np.uint8)  # the engine's buffer: one byte per element
  buffer[:packed.size] = packed
  return buffer


def _dispatch(callback_id, raw, dims=None):
  ref = _registry.get(callback_id)
  cb = ref() if ref is not None else None
  if cb is None:
    raise RuntimeError(f"myplugin: host callback #{callback_id:#x} does not exist in this process (the program "
                       "outlived its lowering and executable, or was serialized in another process: programs with "
                       "host callbacks cannot be serialized)")
  return cb.run(raw, dims)


def live_callbacks() -> int:
  """How many lowered callbacks are still reachable (for tests of their lifetime)."""
  return sum(1 for r in list(_registry.values()) if r() is not None)


def _checked(callback, result_avals):
  """`callback` with jax's checks of its results (the same errors as jax's
  CPU backend gives: jax._src.callback.emit_python_callback)."""
  try:
    from jax._src import dtypes
    canonicalize = getattr(dtypes, "canonicalize_value", None)
  except ImportError:
    canonicalize = None

  def run(*args):
    outs = callback(*args)
    if len(outs) != len(result_avals):
      raise RuntimeError("Mismatched number of outputs from callback. "
                         f"Expected: {len(result_avals)}, Actual: {len(outs)}")
    outs = tuple(np.asarray(o) for o in outs)
    if canonicalize is not None:
      outs = tuple(canonicalize(o) for o in outs)
    for i, (o, aval) in enumerate(zip(outs, result_avals)):
      if o.shape != aval.shape:
        raise RuntimeError(f"Incorrect output shape for return value #{i}: "
                           f"Expected: {aval.shape}, Actual: {o.shape}")
      if o.dtype != aval.dtype:
        raise RuntimeError(f"Incorrect output dtype for return value #{i}: "
                           f"Expected: {aval.dtype}, Actual: {o.dtype}")
    return outs

  return run


def _partitioned_target(ctx) -> str | None:
  """The target of a partitioned=True callback in this context: None where
  it means the same as partitioned=False (one device, shard_map, pmap).

  jaxlib registers a partitioner for jax's partitioned target in its own
  XLA (every partition calls back with its local shards), which the
  engine's partitioner lacks: a program with it is partitioned by jaxlib's
  XLA (jax_plugin/spmd/compile_hooks.py), and our handler serves the name
  in the engine."""
  from jax._src import sharding_impls
  axis_context = ctx.module_context.axis_context
  if not (isinstance(axis_context, sharding_impls.ShardingContext) and axis_context.num_devices > 1):
    return None
  if _partitioned_unavailable is not None:
    raise NotImplementedError(
        f"myplugin cannot run partitioned=True host callbacks in a jit partitioned over {axis_context.num_devices} "
        f"devices here: {_partitioned_unavailable}. Use partitioned=False, or call it inside shard_map, where "
        "every device calls back with its own shard")
  return targets()["partitioned"]


def emit(ctx, callback, token, operands, operand_avals, result_avals, *, has_side_effect, returns_token=True,
         partitioned=False, sharding=None, **kwargs):
  """jax's emit_python_callback, served by myplugin for its own platform."""
  platforms = list(getattr(ctx.module_context, "platforms", ()))
  if platforms != [PLATFORM]:
    return _jax_emit(ctx, callback, token, operands, operand_avals, result_avals, has_side_effect=has_side_effect,
                     returns_token=returns_token, partitioned=partitioned, sharding=sharding, **kwargs)
  if _unavailable is not None:
    raise NotImplementedError(f"myplugin cannot run Python host callbacks on this engine: {_unavailable}")
  from jax._src import core, ffi
  from jax._src.interpreters import mlir

  target = _target
  if partitioned:
    if result_avals:
      raise ValueError("Partitioned callback not supported with return values.")
    target = _partitioned_target(ctx) or _target

  host = HostCallback(_checked(callback, result_avals), operand_avals)
  if token:
    operands = [token, *operands]
    sharding = _with_token_sharding(ctx, sharding)
    ctx = dataclasses.replace(ctx, avals_in=[core.abstract_token, *ctx.avals_in],
                              avals_out=[core.abstract_token, *ctx.avals_out])
  add = getattr(ctx.module_context, "add_host_callback", None)
  if add is not None:
    add(host)
  else:
    ctx.module_context.host_callbacks.append(host)
  result = ffi.build_ffi_lowering_function(target, has_side_effect=has_side_effect)(
      ctx, *operands, callback_id=np.uint64(host.id))
  if sharding is not None:
    mlir.set_sharding(ctx.module_context, result, sharding)
  results = list(result.results)
  if token:
    token, *results = results
  return results, token, host


def _with_token_sharding(ctx, sharding):
  """With Shardy, the token result needs its own (replicated) annotation, as
  jax adds it for its own targets."""
  from jax._src import config, sharding_impls
  array_list = getattr(sharding_impls, "SdyArrayList", None)
  array = getattr(sharding_impls, "SdyArray", None)
  shardy = getattr(getattr(config, "use_shardy_partitioner", None), "value", False)
  if (shardy and array_list is not None and isinstance(sharding, array_list) and len(ctx.avals_out) > 0):
    first = sharding.shardings[0]
    return array_list((array(mesh_shape=(), dim_shardings=(), logical_device_ids=first.logical_device_ids),
                       *sharding.shardings))
  return sharding


def _copy_checkify_rule(engine_kind: str) -> None:
  """checkify's check is lowered to a callback by a rule registered per
  platform, in a module jax imports only on first use (after our rules were
  copied): import it and copy that rule too."""
  from jax._src.interpreters import mlir
  try:
    from jax._src import checkify
  except ImportError:
    return
  prim = getattr(checkify, "check_p", None)
  rules = getattr(mlir, "_platform_specific_lowerings", {})
  rule = rules.get(engine_kind, {}).get(prim)
  if prim is not None and rule is not None and PLATFORM in rules:
    rules[PLATFORM].setdefault(prim, rule)


def _cuda_runtime() -> list[str]:
  from jax_plugin import engine_selection
  found = [engine_selection.package_file(pkg, name)
           for pkg, name in (("nvidia.cuda_runtime", "lib/libcudart.so.12"), ("nvidia.cu13", "lib/libcudart.so.13"))]
  return [p for p in found if p] + ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]


def install(engine_kind: str = "cpu") -> None:
  """Serves callbacks on myplugin: our emit in jax, our handler in the engine."""
  global _jax_emit, _unavailable, _target, _partitioned_unavailable
  import jax
  from jax._src import callback
  from jax_plugin import _myplugin

  current = getattr(callback, "emit_python_callback", None)
  if current is None:
    logger.warning("myplugin: this jax has no emit_python_callback; Python host callbacks stay as jax decides")
    return
  if engine_kind == "cuda":
    errors = []
    capsule = None
    for path in _cuda_runtime():
      try:
        capsule = _myplugin.cuda_host_callback_target(path)
        break
      except RuntimeError as e:
        errors.append(str(e))
    if capsule is None:
      _unavailable = "; ".join(errors) or "this myplugin was built without the CUDA headers"
  else:
    capsule = _myplugin.host_callback_target()
  _myplugin.set_host_callback_dispatcher(_dispatch)
  _target = targets()["cuda" if engine_kind == "cuda" else "cpu"]
  if capsule is not None:
    try:
      jax.ffi.register_ffi_target(_target, capsule, platform=PLATFORM)
    except Exception as e:  # the rest of the backend works without callbacks: say why they do not
      _unavailable = f"registering the handler {_target} in the engine failed: {e}"
      logger.warning("myplugin: Python host callbacks will not run: %s", _unavailable)
  # partitioned=True in a partitioned jit keeps jax's partitioned name after
  # jaxlib partitions it: the host engine runs our handler under it too.
  if engine_kind == "cuda":
    _partitioned_unavailable = ("jaxlib partitions them with its CPU XLA, which myplugin does not yet do for "
                                "the CUDA engine")
  elif capsule is not None and _unavailable is None:
    try:
      jax.ffi.register_ffi_target(targets()["partitioned"], capsule, platform=PLATFORM)
      _partitioned_unavailable = None
    except Exception as e:
      _partitioned_unavailable = f"registering the handler {targets()['partitioned']} in the engine failed: {e}"
  _copy_checkify_rule(engine_kind)
  _keep_a_host_backend()
  if current is not emit:
    _jax_emit = current
    callback.emit_python_callback = emit


def _keep_a_host_backend() -> None:
  """jax runs every callback's Python side on its CPU device (its
  `pure_callback_impl`, `debug_callback_impl` and `io_callback_impl` place
  the arguments there first and fail without one). Under
  `JAX_PLATFORMS=myplugin` alone, that would break even `jax.debug.print`.
  So whenever jax creates our backend and its platform list leaves `cpu`
  out, jax's CPU backend is created beside it, as jax itself does when
  JAX_PLATFORMS is unset; myplugin stays the default backend. jax's
  configuration is left as the user set it: programs and libraries that
  save and restore it (jax's own test harness does) see no change."""
  from jax._src import xla_bridge

  registration = xla_bridge._backend_factories.get(PLATFORM)
  if registration is None or getattr(registration.factory, "_myplugin_host_backend", False):
    return
  create_ours = registration.factory

  def factory():
    client = create_ours()
    if client is not None:
      _add_host_backend()
    return client

  factory._myplugin_host_backend = True
  registration.factory = factory


def _add_host_backend() -> None:
  from jax._src import config, xla_bridge

  value = config.jax_platforms.value
  if not value:
    return  # jax creates every backend it knows, cpu among them
  platforms = [p for name in value.split(",") for p in xla_bridge.expand_platform_alias(name.strip())]
  if "cpu" in platforms or "cpu" in xla_bridge._backends or "cpu" not in xla_bridge._backend_factories:
    return
  try:
    # Through jax's own _init_backend: while it runs, jax's distributed
    # state is hidden (jax_client.hide_during_backend_init), so this is a
    # process-local CPU client whatever the job.
    xla_bridge._backends["cpu"] = xla_bridge._init_backend("cpu")
  except Exception as e:  # our backend works without it; callbacks then fail with jax's own message
    logger.warning("myplugin: jax's CPU backend, which runs Python callbacks' arguments, failed to start: %s", e)

"""jax.experimental.buffer_callback on myplugin's CPU engine.

jax lowers a buffer callback only for its cpu, cuda and rocm backends
("`buffer_callback` not supported on myplugin backend"), to a custom call
whose handler finds the callable in execute-context data that a plugin's
client never gets. So for platform "myplugin" the primitive gets a lowering
of ours: the same callable jax would call (its `wrapped_callback`: the
operands and results unflattened, no return value allowed), kept in a
registry by id, and a typed-FFI call of our handler
(plugin/python/buffer_callback.cc) with that id. The handler hands
`_dispatch` each operand's and result's memory in place; the callback gets
`Buffer`s over it (numpy views: `np.asarray`, `np.from_dlpack`, the operands
read-only) and an `ExecutionContext`, as on jax's CPU backend.

Lifetime: as for host callbacks (callbacks.py), the entry is also in jax's
`host_callbacks` of the module, which keeps it exactly as long as the
lowering or executable, and keeps the program out of jax's persistent cache.

The CUDA engine: not served yet (its buffers are device memory, handed to
the callback with the stream through __cuda_array_interface__ in jax); the
lowering says so.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from jax_plugin import callbacks

_registry: dict[int, weakref.ref] = {}
_unavailable: str | None = "myplugin's buffer callbacks are not installed"
_target: str | None = None


class ExecutionContext:
  """What jax's ExecutionContext offers a callback: the stage, and the
  stream, which a host engine does not have."""

  def __init__(self, stage):
    self.stage = stage

  @property
  def stream(self):
    from jax.errors import JaxRuntimeError
    raise JaxRuntimeError("XLA FFI GPU context is not available")  # jax's CPU backend's words


class Buffer:
  """One operand or result of a buffer callback, in place: jax's Buffer's
  shape, dtype, ndim and writeable, and its memory as a numpy view
  (np.asarray) or through DLPack (np.from_dlpack)."""

  def __init__(self, view: np.ndarray):
    self._view = view

  @property
  def shape(self):
    return self._view.shape

  @property
  def dtype(self):
    return self._view.dtype

  @property
  def ndim(self):
    return self._view.ndim

  @property
  def writeable(self) -> bool:
    return bool(self._view.flags.writeable)

  def __array__(self, dtype=None, copy=None):
    if copy:
      return np.array(self._view, dtype=dtype, copy=True)
    return self._view if dtype is None else self._view.astype(dtype, copy=False)

  def __dlpack__(self, *args, **kwargs):
    return self._view.__dlpack__(*args, **kwargs)

  def __dlpack_device__(self):
    return self._view.__dlpack_device__()


class _Entry:
  def __init__(self, fn):
    self.fn = fn
    self.id = callbacks.new_id()
    _registry[self.id] = weakref.ref(self, lambda _, i=self.id: _registry.pop(i, None))

  def __call__(self, *args):  # jax's host_callbacks hold callables
    return self.fn(*args)


def _view(address: int, dtype: str, dims: tuple, writeable: bool) -> np.ndarray:
  import ml_dtypes  # noqa: F401 (registers the narrow float types with numpy)
  t = np.dtype(getattr(ml_dtypes, dtype)) if not hasattr(np, dtype) else np.dtype(dtype)
  count = int(np.prod(dims)) if dims else 1
  if count == 0 or address == 0:
    view = np.empty(dims, t)
  else:
    raw = (ctypes.c_char * (count * t.itemsize)).from_address(address)
    view = np.frombuffer(raw, dtype=t, count=count).reshape(dims)
  view.flags.writeable = writeable
  return view


def _dispatch(callback_id: int, operands: tuple, results: tuple) -> None:
  ref = _registry.get(callback_id)
  entry = ref() if ref is not None else None
  if entry is None:
    raise RuntimeError(f"buffer callback {callback_id} no longer exists (its executable was deleted)")
  from jax._src.lib import ffi as ffi_lib
  ctx = ExecutionContext(ffi_lib.ExecutionStage.EXECUTE)
  entry.fn(ctx, *[Buffer(_view(*o, writeable=False)) for o in operands],
           *[Buffer(_view(*r, writeable=True)) for r in results])


def _lowering(ctx, *args, callback, in_tree, out_tree, has_side_effect, input_output_aliases,
              command_buffer_compatible, **_):
  """jax's lowering (jax/_src/buffer_callback.py) for platform myplugin."""
  from jax._src import ffi, tree_util, util
  del command_buffer_compatible  # a GPU notion
  if _unavailable is not None:
    raise ValueError(f"`buffer_callback` on myplugin: {_unavailable}")

  def wrapped_callback(exec_ctx, *buffers):
    args_in, args_out = util.split_list(buffers, [in_tree.num_leaves])
    py_args_in, py_kwargs_in = tree_util.tree_unflatten(in_tree, args_in)
    py_args_out = tree_util.tree_unflatten(out_tree, args_out)
    if callback(exec_ctx, py_args_out, *py_args_in, **py_kwargs_in) is not None:
      raise ValueError("buffer_callback callback must not return any values.")

  entry = _Entry(wrapped_callback)
  ctx.module_context.add_host_callback(entry)
  rule = ffi.ffi_lowering(_target, has_side_effect=has_side_effect,
                          operand_output_aliases=dict(input_output_aliases))
  return rule(ctx, *args, callback_id=np.uint64(entry.id))


def install(engine_kind: str = "cpu") -> None:
  """Our lowering of jax's buffer_callback for myplugin; on the host engine
  our handler in the engine."""
  global _unavailable, _target
  import jax
  try:
    from jax._src import buffer_callback
  except ImportError:
    return  # a jax without buffer callbacks
  from jax._src.interpreters import mlir
  from jax_plugin import _myplugin
  if engine_kind == "cuda":
    _unavailable = ("myplugin serves buffer callbacks on its CPU engine only (on GPUs use jax.pure_callback, "
                    "or jax's own cuda backend)")
  else:
    _target, capsule = _myplugin.buffer_callback_target()
    _myplugin.set_buffer_callback_dispatcher(_dispatch)
    try:
      jax.ffi.register_ffi_target(_target, capsule, platform=callbacks.PLATFORM)
      _unavailable = None
    except Exception as e:  # the rest works without them: say why they do not
      _unavailable = f"registering the handler {_target} in the engine failed: {e}"
  mlir.register_lowering(buffer_callback.buffer_callback_p, _lowering, platform=callbacks.PLATFORM)

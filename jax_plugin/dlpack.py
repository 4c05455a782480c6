"""DLPack for myplugin arrays, both ways, without copies where jax's own
backends make none.

Export (``np.from_dlpack(x)``, ``x.__dlpack__()``, any DLPack consumer):
jax's ``Array.__dlpack_device__`` and jaxlib's export know only the
platforms cpu, cuda and rocm (jaxlib picks the DLPack device type from the
client's platform id), so for an array on a myplugin device both are
answered here: the device is the engine's memory (``kDLCPU`` on the CPU
engine; ``kDLCUDA`` and the GPU's ordinal on the CUDA engine,
``kDLCUDAHost`` for its pinned host memory) and the tensor is built by
``_myplugin.buffer_to_dlpack`` over the engine's buffer (an alias, with an
external reference held as jaxlib holds one). Arrays of other platforms
go to jax's own methods, unchanged.

Import (``jax.dlpack.from_dlpack``, ``jnp.from_dlpack``) onto a myplugin
device: jax imports onto the backend that the producer's device type names
(cpu, cuda), then copies to the device asked for. Where the engine can view
the producer's memory (host memory on the CPU engine; the same GPU on the
CUDA engine), the tensor is imported onto the myplugin device directly,
through jaxlib's own import (a view of the memory, or a copy where jaxlib's
CPU backend would copy too: unaligned data, ``copy=True``).
"""

from __future__ import annotations

import functools

PLATFORM = "myplugin"
# The DLPack protocol's oldest version that jax accepts (jax/_src/dlpack.py).
_MIN_VERSION = (0, 5)

_engine_kind = "cpu"
_c_api = None  # our PJRT_Api capsule (registration's)


def install(engine_kind: str, c_api) -> None:
  """Answers DLPack for myplugin arrays; called once the plugin is registered."""
  global _engine_kind, _c_api
  _engine_kind, _c_api = engine_kind, c_api
  from jax._src import array
  from jax._src import dlpack as jax_dlpack

  cls = array.ArrayImpl
  if getattr(cls.__dlpack__, "_myplugin", False):
    return
  jax_export, jax_device = cls.__dlpack__, cls.__dlpack_device__

  @functools.wraps(jax_export)
  def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    if not _on_myplugin(self):
      return jax_export(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    return _export(self, jax_export, stream, max_version, dl_device, copy)

  @functools.wraps(jax_device)
  def __dlpack_device__(self):
    if not _on_myplugin(self):
      return jax_device(self)
    return _device_of(self)

  __dlpack__._myplugin = True
  cls.__dlpack__ = __dlpack__
  cls.__dlpack_device__ = __dlpack_device__

  jax_import = jax_dlpack.from_dlpack

  @functools.wraps(jax_import)
  def from_dlpack(external_array, device=None, copy=None):
    target = _import_target(external_array, device)
    if target is None:
      return jax_import(external_array, device=device, copy=copy)
    return _import(external_array, target, copy)

  # jax.dlpack's name is what users and jnp.from_dlpack call.
  import jax.dlpack
  jax_dlpack.from_dlpack = from_dlpack
  jax.dlpack.from_dlpack = from_dlpack


def _single_device(x):
  devices = x.sharding.device_set
  return next(iter(devices)) if len(devices) == 1 else None


def _on_myplugin(x) -> bool:
  device = next(iter(x.sharding.device_set), None)
  return device is not None and device.platform == PLATFORM


def _device_of(x):
  """(DLDeviceType, device id) of a single-device myplugin array."""
  from jax._src.typing import DLDeviceType

  if len(x._arrays) != 1:
    raise BufferError("__dlpack__ only supported for unsharded arrays.")
  if _engine_kind != "cuda":
    return DLDeviceType.kDLCPU, 0
  device = _single_device(x)
  kind = DLDeviceType.kDLCUDAHost if x.sharding.memory_kind == "pinned_host" else DLDeviceType.kDLCUDA
  return kind, device.local_hardware_id


def _export(x, jax_export, stream, max_version, dl_device, copy):
  from jax_plugin import _myplugin

  x._check_if_deleted()  # jax's own export says so first: "Array has been deleted ..."
  if _single_device(x) is None:
    raise BufferError(
        "to_dlpack can only pack a dlpack tensor from an array on a singular device, but an array with a "
        f"Sharding over {len(x.sharding.device_set)} devices was provided.")
  if max_version is not None and tuple(max_version) < _MIN_VERSION:
    raise BufferError(f"JAX does not support any version below {_MIN_VERSION} but version ({max_version}) "
                      "was requested.")
  own = _device_of(x)
  if dl_device is not None and (int(dl_device[0]), int(dl_device[1])) != (int(own[0]), own[1]):
    # Another device: jax's own export moves the array there (or refuses).
    return jax_export(x, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
  if copy:
    import jax.numpy as jnp
    x = jnp.array(x, copy=True)
  # The buffer is ready when the tensor is handed out: any consumer stream
  # may use it at once.
  return _myplugin.buffer_to_dlpack(_c_api, x, int(own[0]), int(own[1]))


def _import_target(external_array, device):
  """The myplugin device to import onto directly, or None for jax's way."""
  from jax._src.sharding import Sharding

  if isinstance(device, Sharding):
    if len(device.device_set) != 1:
      return None  # jax's own error
    device = next(iter(device.device_set))
  if device is None:
    from jax._src import array
    # A myplugin array's own device, as jax keeps a cpu array on its device.
    # jax keeps a jax array on its own device; a myplugin array too.
    if isinstance(external_array, array.ArrayImpl):
      device = _single_device(external_array) if _on_myplugin(external_array) else None
    else:
      device = _device_for_unnamed_producer(external_array)
  if device is None or getattr(device, "platform", None) != PLATFORM or not hasattr(external_array, "__dlpack_device__"):
    return None
  dl_type, dl_id = external_array.__dlpack_device__()
  if _engine_kind == "cuda":
    viewable = int(dl_type) == 3 or (int(dl_type) == 2 and dl_id == device.local_hardware_id)
  else:
    viewable = int(dl_type) == 1
  return device if viewable else None


def _device_for_unnamed_producer(external_array):
  """jax imports host memory onto its CPU backend (GPU memory onto its CUDA
  backend). Where the user's platforms leave that backend out
  (JAX_PLATFORMS=myplugin: the CPU backend that jax keeps for callbacks is
  not theirs), the myplugin device that views the memory takes it instead;
  where they list it, jax's way stands."""
  import jax

  platforms = [p.strip() for p in (jax.config.jax_platforms or "").split(",") if p.strip()]
  if not platforms or PLATFORM not in platforms or not hasattr(external_array, "__dlpack_device__"):
    return None
  dl_type, dl_id = external_array.__dlpack_device__()
  owner = {1: "cpu", 2: "cuda", 3: "cuda"}.get(int(dl_type))
  if owner is None or owner in platforms or (owner == "cuda" and "gpu" in platforms):
    return None
  local = jax.local_devices(backend=PLATFORM)
  if owner == "cpu":
    return local[0] if _engine_kind != "cuda" else None
  return next((d for d in local if d.local_hardware_id == dl_id), None)


def _import(external_array, device, copy):
  """jaxlib's import with the myplugin device: a view of the producer's
  memory. jaxlib's own copy (unaligned host data, copy=True) asks the client
  for host-buffer semantics that no C API plugin offers, so a copy is made
  here: of the view on the device, or of the host data through numpy."""
  from jax._src import dtypes
  from jax._src.lib import _jax, jaxlib_extension_version
  import jax
  import jax.numpy as jnp
  import numpy as np

  dl_type, _ = external_array.__dlpack_device__()
  stream = None
  if int(dl_type) == 2:
    try:
      stream = device.get_stream_for_external_ready_events()
    except _jax.JaxRuntimeError as err:
      if "UNIMPLEMENTED" not in str(err):
        raise
  capsule = external_array.__dlpack__(stream=stream)
  try:
    if jaxlib_extension_version >= 467:
      arr = _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream, False, int(dl_type))
    else:
      arr = _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream, False)
  except _jax.JaxRuntimeError as e:
    text = str(e)
    if "is not aligned to" not in text or int(dl_type) != 1:
      raise
    if copy is False:
      raise ValueError("Specified input which requires a copy since the source data buffer "
                       f"{text[text.index('is not aligned to'):]} However copy=False. Set copy=True or "
                       "copy=None to perform the requested operation.") from None
    arr = jax.device_put(np.from_dlpack(external_array), device)  # the unconsumed capsule frees itself
  else:
    if copy:
      arr = jnp.array(arr, copy=True)
  # As jax does: x64-less jax canonicalizes the imported type.
  return jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype))

"""DLPack both ways on myplugin, against jax's CPU backend in the same
process: what a consumer receives (numpy's np.from_dlpack, and a consumer
of our own that reads the capsule as DLPack's specification lays it out),
whether it aliases the array's memory, and jax.dlpack.from_dlpack onto a
myplugin device. jax's own export refuses the platform name myplugin."""
from __future__ import annotations

import ctypes
import gc
import sys
import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

try:
  from jax.experimental.layout import Format, Layout
except ImportError:  # jax before 0.7 named them Layout and DeviceLocalLayout
  from jax.experimental.layout import DeviceLocalLayout as Layout, Layout as Format

from proc import child_env, run_python

PLATFORMS = ("myplugin", "cpu")
KDLCPU = 1


# ---- a DLPack consumer of our own, from the specification's C structures ----

class DLDevice(ctypes.Structure):
  _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
  _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
  _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
              ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
              ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
  pass


# A plain C function pointer: ctypes calls it without the GIL, as a consumer
# on another thread would.
_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Consumed:
  """What a consumer took from a capsule; free() calls the producer's deleter."""

  def __init__(self, capsule):
    assert _api.PyCapsule_IsValid(capsule, b"dltensor")
    self.ptr = ctypes.cast(_api.PyCapsule_GetPointer(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
    _api.PyCapsule_SetName(capsule, b"used_dltensor")  # the protocol: the tensor is the consumer's now
    t = self.ptr.contents.dl_tensor
    self.data = t.data
    self.device = (t.device.device_type, t.device.device_id)
    self.dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    self.shape = tuple(t.shape[i] for i in range(t.ndim))
    self.strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    self.byte_offset = t.byte_offset

  def read(self, dtype, nbytes):
    return np.frombuffer(ctypes.string_at(self.data + self.byte_offset, nbytes), dtype=dtype)

  def free(self):
    self.ptr.contents.deleter(self.ptr)


def fields(c: Consumed):
  return {"device": c.device, "dtype": c.dtype, "shape": c.shape, "strides": c.strides, "byte_offset": c.byte_offset}


def on(platform, value, **kwargs):
  return jax.device_put(value, jax.devices(platform)[0], **kwargs)


# ---- export ----

DTYPES = ["float32", "float16", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool", "complex64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_from_dlpack_aliases_the_buffer_as_on_cpu(dtype):
  value = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
  got = {}
  for platform in PLATFORMS:
    x = on(platform, value)
    n = np.from_dlpack(x)
    np.testing.assert_array_equal(n, value)
    assert n.dtype == value.dtype
    assert n.ctypes.data == x.unsafe_buffer_pointer(), platform  # no copy
    assert x.__dlpack_device__() == (KDLCPU, 0)
    got[platform] = (n.strides, n.flags.writeable, tuple(map(int, x.__dlpack_device__())))
  assert got["myplugin"] == got["cpu"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_types_numpy_cannot_take_read_as_on_cpu(dtype):
  """numpy refuses DLPack's bfloat16 and float8 codes; a consumer that knows
  them gets the same type code and bytes as from jax's CPU backend."""
  value = np.arange(6, dtype=np.float32).reshape(2, 3).astype(getattr(ml_dtypes, dtype))
  seen = {}
  for platform in PLATFORMS:
    x = on(platform, value)
    with pytest.raises(Exception) as err:
      np.from_dlpack(x)
    c = Consumed(x.__dlpack__())
    assert c.data == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(c.read(value.dtype, value.nbytes), value.ravel())
    seen[platform] = (type(err.value), fields(c))
    c.free()
  assert seen["myplugin"] == seen["cpu"]


def test_int4_is_refused_as_on_cpu():
  for platform in PLATFORMS:
    x = on(platform, np.arange(4, dtype=ml_dtypes.int4))
    with pytest.raises(Exception, match="DLPack"):
      x.__dlpack__()


def test_consumer_fields_match_cpu_and_deleter_releases_the_array():
  value = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
  seen = {}
  for platform in PLATFORMS:
    x = on(platform, value)
    refs = sys.getrefcount(x)
    c = Consumed(x.__dlpack__())
    assert c.data == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(c.read(np.float32, value.nbytes).reshape(3, 4), value)
    seen[platform] = fields(c)
    if platform == "myplugin":
      assert sys.getrefcount(x) == refs + 1  # the tensor keeps the array
    # The consumer frees it on a thread of its own, without the GIL.
    worker = threading.Thread(target=c.free)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    gc.collect()
    assert sys.getrefcount(x) == refs, platform
  assert seen["myplugin"] == seen["cpu"]
  assert seen["cpu"]["strides"] == (4, 1)


def test_an_unconsumed_capsule_frees_itself():
  x = on("myplugin", np.ones(8, np.float32))
  refs = sys.getrefcount(x)
  capsule = x.__dlpack__()
  assert sys.getrefcount(x) == refs + 1
  del capsule
  gc.collect()
  assert sys.getrefcount(x) == refs


def test_memory_outlives_delete_as_on_cpu():
  """The tensor holds the buffer, as jaxlib's does: deleting the array
  leaves what numpy took intact, and the array reads as deleted at once."""
  value = np.arange(1 << 16, dtype=np.float32)
  for platform in PLATFORMS:
    x = on(platform, value * 2)
    n = np.from_dlpack(x)
    x.delete()
    assert x.is_deleted(), platform
    # Give the freed memory, had it been freed, to other arrays.
    junk = [on(platform, np.full_like(value, -1.0)) for _ in range(8)]
    jax.block_until_ready(junk)
    np.testing.assert_array_equal(n, value * 2, err_msg=platform)


def test_a_deleted_array_is_refused_as_on_cpu():
  said = {}
  for platform in PLATFORMS:
    x = on(platform, np.arange(4, dtype=np.float32))
    x.delete()
    with pytest.raises(RuntimeError) as e:
      np.from_dlpack(x)
    said[platform] = str(e.value)
  assert said["myplugin"] == said["cpu"] and "deleted" in said["cpu"], said


def test_a_donated_array_that_an_export_holds_keeps_the_exported_bytes():
  """A jitted call that donates an array which numpy holds through DLPack:
  the call's result is right and numpy's bytes do not change (the engine
  gives the result memory of its own), on both backends."""
  value = np.arange(1 << 14, dtype=np.float32)
  deleted = {}
  for platform in PLATFORMS:
    x = on(platform, value)
    n = np.from_dlpack(x)
    y = jax.jit(lambda a: a * 3, donate_argnums=0)(x)
    np.testing.assert_array_equal(np.asarray(y), value * 3, err_msg=platform)
    np.testing.assert_array_equal(n, value, err_msg=platform)
    deleted[platform] = x.is_deleted()  # not donated after all, on jax's CPU backend
  assert deleted["myplugin"] == deleted["cpu"], deleted


@pytest.mark.parametrize("major_to_minor", [(1, 0), (0, 1, 2), (2, 0, 1)])
def test_non_default_layouts_export_strides_as_on_cpu(major_to_minor):
  shape = (4, 8) if len(major_to_minor) == 2 else (2, 4, 6)
  value = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) * 3 - 7
  seen = {}
  for platform in PLATFORMS:
    device = jax.devices(platform)[0]
    x = jax.device_put(value, Format(Layout(major_to_minor=major_to_minor), jax.sharding.SingleDeviceSharding(device)))
    n = np.from_dlpack(x)
    np.testing.assert_array_equal(n, value, err_msg=platform)
    assert n.ctypes.data == x.unsafe_buffer_pointer(), platform
    seen[platform] = n.strides
  assert seen["myplugin"] == seen["cpu"]


def test_copy_true_exports_a_copy_as_on_cpu():
  value = np.arange(16, dtype=np.float32)
  for platform in PLATFORMS:
    x = on(platform, value)
    c = Consumed(x.__dlpack__(copy=True))
    assert c.data != x.unsafe_buffer_pointer(), platform
    np.testing.assert_array_equal(c.read(np.float32, value.nbytes), value)
    c.free()


def test_sharded_arrays_are_refused_as_on_cpu():
  for platform in PLATFORMS:
    mesh = jax.sharding.Mesh(np.array(jax.devices(platform)[:2]), ("x",))
    x = jax.device_put(np.arange(8.0), NamedSharding(mesh, P("x")))
    with pytest.raises(BufferError):
      x.__dlpack__()
    with pytest.raises(BufferError):
      x.__dlpack_device__()


def test_a_consumer_stream_is_served_by_a_ready_buffer():
  """jax's CPU backend takes a stream for host memory when the buffer is
  ready and refuses it (UNIMPLEMENTED) while it is not: a race. myplugin's
  export waits for the buffer before it hands the tensor out, so any stream
  is served, the result of a jit still running included."""
  x = on("myplugin", np.arange(1 << 20, dtype=np.float32))
  y = jax.jit(lambda v: jnp.sin(v) * 2)(x)
  c = Consumed(y.__dlpack__(stream=1))
  np.testing.assert_allclose(c.read(np.float32, 4 << 20), np.sin(np.arange(1 << 20, dtype=np.float32)) * 2,
                             rtol=1e-6, atol=1e-6)
  c.free()


def test_another_dl_device_goes_through_jax():
  """dl_device=(kDLCPU, 0) is the array's own device: no copy."""
  x = on("myplugin", np.arange(4, dtype=np.float32))
  c = Consumed(x.__dlpack__(dl_device=(KDLCPU, 0), copy=False))
  assert c.data == x.unsafe_buffer_pointer()
  c.free()


def test_a_result_of_a_jit_exports():
  x = on("myplugin", np.arange(10, dtype=np.float32))
  y = jax.jit(lambda v: v * 3 + 1)(x)
  n = np.from_dlpack(y)
  assert n.ctypes.data == y.unsafe_buffer_pointer()
  np.testing.assert_array_equal(n, np.arange(10, dtype=np.float32) * 3 + 1)


# ---- import ----

def _aligned(value, alignment=64):
  """A copy of `value` whose data starts on `alignment` bytes (jaxlib views
  only aligned host memory; it copies the rest)."""
  raw = np.empty(value.nbytes + alignment, np.uint8)
  start = -raw.ctypes.data % alignment
  out = raw[start:start + value.nbytes].view(value.dtype).reshape(value.shape)
  out[...] = value
  return out


def test_from_dlpack_onto_a_myplugin_device_views_numpy_memory_as_cpu_does():
  value = _aligned(np.arange(64, dtype=np.float32).reshape(8, 8))
  for platform in PLATFORMS:
    device = jax.devices(platform)[0]
    y = jax.dlpack.from_dlpack(value, device=device, copy=False)
    assert y.devices() == {device}
    assert y.unsafe_buffer_pointer() == value.ctypes.data, platform  # a view, not a copy
    np.testing.assert_array_equal(np.asarray(y), value)
    z = jnp.from_dlpack(value, device=device)
    assert z.unsafe_buffer_pointer() == value.ctypes.data, platform
  # Any myplugin device views host memory (jax's CPU backend views it on
  # device 0 only, and copies to the others).
  device = jax.devices("myplugin")[3]
  y = jax.dlpack.from_dlpack(value, device=device, copy=False)
  assert y.devices() == {device} and y.unsafe_buffer_pointer() == value.ctypes.data


def test_from_dlpack_copies_unaligned_or_asked_as_cpu_does():
  raw = np.arange(65, dtype=np.float32)
  value = raw[1:]  # 4 bytes past an aligned start
  for platform in PLATFORMS:
    device = jax.devices(platform)[0]
    y = jax.dlpack.from_dlpack(value, device=device)
    assert y.unsafe_buffer_pointer() != value.ctypes.data
    np.testing.assert_array_equal(np.asarray(y), value)
    with pytest.raises(ValueError, match="requires a copy"):
      jax.dlpack.from_dlpack(value, device=device, copy=False)
    aligned = _aligned(raw)
    y = jax.dlpack.from_dlpack(aligned, device=device, copy=True)
    np.testing.assert_array_equal(np.asarray(y), raw)
    # copy=True on jax's CPU backend asks for "mutable zero-copy" host
    # semantics, which alias aligned memory after all; myplugin copies.
    if platform == "myplugin":
      assert y.unsafe_buffer_pointer() != aligned.ctypes.data


def test_from_dlpack_of_a_myplugin_array_stays_on_its_device_as_cpu_does():
  value = np.arange(16, dtype=np.int32)
  for platform in PLATFORMS:
    x = on(platform, value)
    y = jax.dlpack.from_dlpack(x)
    assert y.devices() == x.devices()
    assert y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer(), platform
    np.testing.assert_array_equal(np.asarray(y), value)


def test_from_dlpack_between_platforms():
  """A myplugin array imported onto jax's CPU device and back: the values."""
  value = np.arange(6, dtype=np.float32)
  x = on("myplugin", value)
  y = jax.dlpack.from_dlpack(x, device=jax.devices("cpu")[0])
  assert y.devices() == {jax.devices("cpu")[0]}
  z = jax.dlpack.from_dlpack(y, device=jax.devices("myplugin")[1])
  assert z.devices() == {jax.devices("myplugin")[1]}
  np.testing.assert_array_equal(np.asarray(z), value)


# ---- the CUDA engine's answers, without a GPU ----

def test_cuda_engine_names_the_gpu(monkeypatch):
  """On the CUDA engine an array's DLPack device is kDLCUDA and the device's
  local hardware id (the CUDA ordinal), as jax's CUDA backend answers; a
  consumer's stream is accepted there (the buffer is ready before export)."""
  from jax_plugin import dlpack

  monkeypatch.setattr(dlpack, "_engine_kind", "cuda")
  device = jax.devices("myplugin")[5]
  x = on("myplugin", np.ones(4, np.float32))
  x = jax.device_put(x, device)
  assert tuple(map(int, x.__dlpack_device__())) == (2, device.local_hardware_id)
  c = Consumed(x.__dlpack__(stream=1))
  assert c.device == (2, device.local_hardware_id)
  c.free()


# ---- only myplugin, in a process of its own ----

ONLY_MYPLUGIN = r"""
import jax, numpy as np
x = jax.device_put(np.arange(6, dtype=np.float32), jax.devices()[2])
n = np.from_dlpack(x)
assert n.ctypes.data == x.unsafe_buffer_pointer()
print("export", n.tolist())
y = jax.dlpack.from_dlpack(x)
assert y.devices() == x.devices() and y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
z = jax.dlpack.from_dlpack(np.arange(3.0, dtype=np.float32), device=jax.devices()[1])
d, = z.devices()
print("import", d.platform, d.id, np.asarray(z).tolist())
# No device: the user's platforms hold no CPU backend, so myplugin's first
# device views the memory (jax's CPU backend, kept for callbacks, is not theirs).
host = np.arange(64, dtype=np.float32)
w = jax.dlpack.from_dlpack(host)
d, = w.devices()
print("default", d.platform, d.id, w.unsafe_buffer_pointer() == host.ctypes.data or host.ctypes.data % 64 != 0)
# A jax array stays on its device, one of jax's CPU backend too.
c = jax.device_put(np.arange(4, dtype=np.int32), jax.devices("cpu")[0])
d, = jax.dlpack.from_dlpack(c).devices()
print("jax cpu array", d.platform)
"""


def test_only_myplugin():
  r = run_python(["-c", ONLY_MYPLUGIN], child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="4"))
  assert r.returncode == 0, r.output
  assert "export [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]" in r.stdout
  assert "import myplugin 1 [0.0, 1.0, 2.0]" in r.stdout
  assert "default myplugin 0 True" in r.stdout
  assert "jax cpu array cpu" in r.stdout

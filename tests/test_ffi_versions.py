"""XLA FFI API versions at registration: read from the handler and from the
engine, judged against the known pairs (plugin/engine/ffi_api_version.cc),
an unknown pair refused when it is registered (never a NOT_FOUND when a
program runs), and a known newer handler adapted and run.

The handlers here are ctypes functions that answer XLA's metadata call
with a chosen version, as a handler built against those headers would."""

import ctypes
import os
import sys

import jax
import jaxlib.version
import numpy as np
import pytest

from proc import run

from jax_plugin import _myplugin, compatibility, lowering

class _Version(ctypes.Structure):
  _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("major", ctypes.c_int),
              ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
  _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _Version), ("traits", ctypes.c_uint32)]


class _ExtensionBase(ctypes.Structure):
  _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", ctypes.c_void_p)]


class _MetadataExtension(ctypes.Structure):
  _fields_ = [("base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata))]


class _CallFrame(ctypes.Structure):
  _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(_ExtensionBase))]


_METADATA = 1  # XLA_FFI_Extension_Metadata
_HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_CallFrame))
_keep = []  # ctypes callbacks must outlive the engine's pointer to them


def _handler(minor: int, executions: list | None = None):
  """A capsule of a handler that reports FFI API 0.`minor` and counts its executions."""

  @_HANDLER
  def handler(frame):
    extension = frame.contents.extension_start
    if extension and extension.contents.type == _METADATA:
      metadata = ctypes.cast(extension, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
      metadata.api_version.major, metadata.api_version.minor = 0, minor
      metadata.traits = 0
    elif executions is not None:
      executions.append(1)
    return None

  _keep.append(handler)
  return jax.ffi.pycapsule(handler)


def _engine():
  jax.devices()
  engine = _myplugin.engine_ffi_api_version()
  assert engine is not None, "the engine's FFI version was not read at start"
  return engine


def test_versions_are_read_from_the_libraries():
  engine = _engine()
  # The bundled CPU engine (lammps-jax-pjrt-cpu 0.11.2) speaks XLA FFI 0.4.
  assert engine == "0.4"
  assert _myplugin.handler_ffi_api_version("t", _handler(5)) == "0.5"
  # jaxlib's own handlers speak its release's version: 0.10.2 0.3, 0.11.2 0.4, 0.12 0.5.
  expected = {"0.10": "0.3", "0.11": "0.4", "0.12": "0.5"}[".".join(jaxlib.version.__version__.split(".")[:2])]
  assert set(compatibility.ffi_versions(lowering.jaxlib_cpu_targets())) == {expected}
  assert _myplugin.built_ffi_api_version() in ("0.3", "0.4")
  report = compatibility.report()
  assert report["engine_ffi_api"] == "0.4" and report["jaxlib"] == jaxlib.version.__version__


def test_every_known_pair_says_why():
  pairs = _myplugin.ffi_compatible_pairs()
  assert ("0.5", "0.4", True) in [p[:3] for p in pairs]
  for handler, engine, adapted, reason in pairs:
    assert len(reason) > 40, (handler, engine)
    assert adapted == (tuple(map(int, handler.split("."))) > tuple(map(int, engine.split("."))))


def test_an_unknown_pair_is_refused_when_registered_naming_both_versions():
  _engine()
  with pytest.raises(Exception, match=r"'test_ffi_0_6'.*API 0\.6.*speaks 0\.4.*Known pairs"):
    jax.ffi.register_ffi_target("test_ffi_0_6", _handler(6), platform="myplugin")


def test_the_start_check_names_jaxlib_the_engine_and_both_versions():
  _engine()
  with pytest.raises(RuntimeError) as e:
    compatibility.check_ffi({"lapack_future_ffi": _handler(6)}, "lammps-jax-pjrt-cpu 0.11.2 at /x.so",
                            {"jax": "0.13.0", "jaxlib": "0.13.0"})
  msg = str(e.value)
  for part in ("jaxlib 0.13.0", "XLA FFI API 0.6", "lapack_future_ffi", "lammps-jax-pjrt-cpu 0.11.2", "speaks 0.4",
               "0.5 on 0.4"):
    assert part in msg, (part, msg)
  compatibility.check_ffi({"lapack_today_ffi": _handler(5)}, "engine")  # a known pair passes


def test_a_newer_handler_of_a_known_pair_is_adapted_and_runs():
  # jaxlib 0.12's handlers on the 0.4 engine: without the adapter the engine
  # drops the registration and the program below fails with NOT_FOUND.
  _engine()
  executions = []
  jax.ffi.register_ffi_target("test_ffi_0_5", _handler(5, executions), platform="myplugin")
  call = jax.ffi.ffi_call("test_ffi_0_5", jax.ShapeDtypeStruct((), np.float32), has_side_effect=True)
  jax.block_until_ready(jax.jit(call)())
  assert executions == [1]


def test_initialization_reports_versions_in_one_line():
  code = "import jax; jax.devices(); from jax_plugin import compatibility; print('REPORT', compatibility.report())"
  out = run([sys.executable, "-c", code], dict(os.environ, JAX_PLATFORMS="myplugin"), timeout=120, cwd="/")
  assert out.returncode == 0, out.stderr
  assert "'engine_ffi_api': '0.4'" in out.stdout

"""Arrays with a non-default on-device layout (jax.experimental.layout) on
myplugin, against jax's CPU backend in the same process: what reads back,
what a jit computes from them, and the layouts that jax reports. jaxlib
learns a buffer's layout only through the PJRT Layouts extension; without
it, a column-major buffer read back as row-major, its elements out of order."""
from __future__ import annotations

import ctypes
import math

import jax
import jax_plugin
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from reference import assert_same

try:
  from jax.experimental.layout import Format, Layout
except ImportError:  # jax before 0.7 named them Layout and DeviceLocalLayout
  from jax.experimental.layout import DeviceLocalLayout as Layout, Layout as Format

PLATFORMS = ("myplugin", "cpu")

# (shape, major_to_minor): row-major, column-major, a 3-D permutation.
CASES = [
    ((4, 8), (0, 1)),
    ((4, 8), (1, 0)),
    ((2, 8), (1, 0)),
    ((2, 4, 6), (2, 0, 1)),
]


def _input(shape):
  return np.arange(math.prod(shape), dtype=np.int32).reshape(shape) * 3 - 7


def _sharding(platform, kind):
  devices = jax.devices(platform)
  if kind == "single":
    return SingleDeviceSharding(devices[0])
  mesh = Mesh(np.array(devices[:4]).reshape(2, 2), ("x", "y"))
  return NamedSharding(mesh, P("x", "y"))


def _major_to_minor(array):
  return tuple(array.format.layout.major_to_minor)


def _put_on_both(shape, major_to_minor, kind):
  """The array put with the layout on each platform: {platform: array}."""
  x = _input(shape)
  out = {}
  for platform in PLATFORMS:
    fmt = Format(Layout(major_to_minor=major_to_minor), _sharding(platform, kind))
    out[platform] = jax.device_put(x, fmt)
  return x, out


@pytest.mark.parametrize("kind", ["single", "named"])
@pytest.mark.parametrize("shape,major_to_minor", CASES)
def test_device_put_with_layout_reads_back_in_order(shape, major_to_minor, kind):
  x, arrays = _put_on_both(shape, major_to_minor, kind)
  for platform, array in arrays.items():
    assert _major_to_minor(array) == major_to_minor, platform
    np.testing.assert_array_equal(np.asarray(array), x, err_msg=platform)
    for shard in array.addressable_shards:
      np.testing.assert_array_equal(np.asarray(shard.data), x[shard.index], err_msg=platform)
  assert arrays["myplugin"].format.layout == arrays["cpu"].format.layout


@pytest.mark.parametrize("kind", ["single", "named"])
@pytest.mark.parametrize("shape,major_to_minor", CASES)
def test_jit_of_an_array_with_layout(shape, major_to_minor, kind):
  x, arrays = _put_on_both(shape, major_to_minor, kind)
  results = {p: jax.jit(lambda a: a * 2 + 1)(a) for p, a in arrays.items()}
  np.testing.assert_array_equal(np.asarray(results["myplugin"]), x * 2 + 1)
  assert_same(np.asarray(results["myplugin"]), np.asarray(results["cpu"]))
  assert results["myplugin"].format.layout == results["cpu"].format.layout


@pytest.mark.parametrize("kind", ["single", "named"])
def test_jit_with_in_and_out_layouts(kind):
  shape = (4, 8)
  x = _input(shape)
  results = {}
  for platform in PLATFORMS:
    s = _sharding(platform, kind)
    f = jax.jit(lambda a: (a + 1).T @ a,
                in_shardings=Format(Layout(major_to_minor=(1, 0)), s),
                out_shardings=Format(Layout(major_to_minor=(1, 0)), SingleDeviceSharding(jax.devices(platform)[0])
                                     if kind == "single" else s.update(spec=P())))
    arg = jax.device_put(x, Format(Layout(major_to_minor=(1, 0)), s))
    compiled = f.lower(arg).compile()
    assert tuple(compiled.input_formats[0][0].layout.major_to_minor) == (1, 0), platform
    assert tuple(compiled.output_formats.layout.major_to_minor) == (1, 0), platform
    results[platform] = compiled(arg)
  expected = (x + 1).T @ x
  for platform, out in results.items():
    assert _major_to_minor(out) == (1, 0), platform
    np.testing.assert_array_equal(np.asarray(out), expected, err_msg=platform)
  assert results["myplugin"].format == results["cpu"].format or (
      results["myplugin"].format.layout == results["cpu"].format.layout)


def test_auto_layout_compiles_and_runs_like_cpu():
  shape = (8, 4)
  x = _input(shape)
  formats, outs = {}, {}
  for platform in PLATFORMS:
    s = SingleDeviceSharding(jax.devices(platform)[0])
    f = jax.jit(lambda a: a.T * 2, in_shardings=Format(Layout.AUTO, s), out_shardings=Format(Layout.AUTO, s))
    compiled = f.lower(jax.ShapeDtypeStruct(shape, np.int32, sharding=s)).compile()
    formats[platform] = (compiled.input_formats[0][0].layout, compiled.output_formats.layout)
    arg = jax.device_put(x, compiled.input_formats[0][0])
    outs[platform] = compiled(arg)
    np.testing.assert_array_equal(np.asarray(outs[platform]), x.T * 2, err_msg=platform)
  assert formats["myplugin"] == formats["cpu"]
  assert outs["myplugin"].format.layout == outs["cpu"].format.layout


def test_default_layout_matches_cpu():
  for shape in [(3,), (4, 8), (2, 3, 5)]:
    layouts = {}
    for platform in PLATFORMS:
      arr = jax.device_put(_input(shape), jax.devices(platform)[0])
      layouts[platform] = arr.format.layout
    assert layouts["myplugin"] == layouts["cpu"]
    assert tuple(layouts["myplugin"].major_to_minor) == tuple(range(len(shape)))


def test_client_default_layout_matches_cpu():
  for dtype, shape in [(np.float32, (4, 8)), (np.int8, (2, 3, 5)), (np.bool_, (7,))]:
    layouts = {}
    for platform in PLATFORMS:
      d = jax.devices(platform)[0]
      layouts[platform] = d.client.get_default_layout(np.dtype(dtype), shape, d)
    assert str(layouts["myplugin"]) == str(layouts["cpu"])


LAYOUTS_TYPE = 4  # PJRT_Extension_Type_Layouts
LAYOUTS_ENTRIES = 7  # version 4 of the extension: 0x50 bytes


def _layouts_extension(api):
  ext = ctypes.c_void_p.from_address(api + 8).value
  while ext:
    if ctypes.c_int.from_address(ext + 8).value == LAYOUTS_TYPE:
      return ext
    ext = ctypes.c_void_p.from_address(ext + 16).value
  return None


def _entries(ext):
  size = ctypes.c_size_t.from_address(ext).value
  return [ctypes.c_void_p.from_address(ext + 24 + 8 * i).value if 24 + 8 * (i + 1) <= size else None
          for i in range(LAYOUTS_ENTRIES)]


def test_extension_chained_with_the_entries_the_engine_has():
  jax.devices("myplugin")  # the engine is loaded and the chain made
  def api_of(path):
    lib = ctypes.CDLL(path)
    lib.GetPjrtApi.restype = ctypes.c_void_p
    return lib.GetPjrtApi()
  engine = _layouts_extension(api_of(jax_plugin.engine_path()))
  ours = _layouts_extension(api_of(jax_plugin.library_path()))
  if engine is None:
    assert ours is None
    return
  assert ours is not None
  # jaxlib reads every entry of its version without looking at struct_size.
  assert ctypes.c_size_t.from_address(ours).value == 24 + 8 * LAYOUTS_ENTRIES
  assert [e is not None for e in _entries(ours)] == [e is not None for e in _entries(engine)]

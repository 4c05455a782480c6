"""What jax and users see of the plugin: names, devices, memories, the
C API table, and the library's exports."""
import ctypes
import os
import shutil

import jax
import numpy as np
import pytest

from proc import child_env, run, run_python

import jax_plugin
from jax_plugin import _myplugin


def test_platform_name_and_version():
  backend = jax.devices("myplugin")[0].client
  assert backend.platform == "myplugin"
  device = jax.devices()[0]
  assert device.platform == "myplugin"
  assert device.client.platform == "myplugin"
  assert jax_plugin.__version__ == "0.1.0"


def test_devices_are_ours():
  devices = jax.devices("myplugin")
  assert [d.id for d in devices] == list(range(8))
  assert all(d.process_index == 0 for d in devices)
  assert jax.process_index() == 0 and jax.process_count() == 1
  assert jax.local_device_count() == 8 and jax.device_count() == 8
  d = devices[3]
  assert repr(d) == "MypluginDevice(id=3, process_index=0, kind=cpu)"
  assert d.device_kind == "cpu"
  assert d.engine_device_kind == "cpu"  # a device attribute
  assert d.local_hardware_id == 3


def test_memories():
  d = jax.devices("myplugin")[2]
  kinds = {m.kind for m in d.addressable_memories()}
  assert "device" in kinds
  assert d.default_memory().kind == "device"
  assert all(repr(m).startswith("MypluginMemory(") and "myplugin" in str(m) for m in d.addressable_memories())
  assert d in d.default_memory().addressable_by_devices()
  x = jax.device_put(np.arange(4.0), d)
  assert x.devices() == {d}
  assert x.sharding.memory_kind == "device"


def test_copy_between_devices():
  a, b = jax.devices("myplugin")[:2]
  x = jax.device_put(np.arange(10), a)
  y = jax.device_put(x, b)
  assert y.devices() == {b}
  np.testing.assert_array_equal(np.asarray(y), np.arange(10))


def _api_table():
  lib = ctypes.CDLL(jax_plugin.library_path())
  lib.GetPjrtApi.restype = ctypes.c_void_p
  return lib.GetPjrtApi()


def test_api_table_is_complete_and_versioned():
  api = _api_table()
  struct_size = ctypes.c_size_t.from_address(api).value
  # struct_size, extension_start, then PJRT_Api_Version {size, ext, major, minor}.
  major = ctypes.c_int.from_address(api + 32).value
  minor = ctypes.c_int.from_address(api + 36).value
  assert (major, minor) == _myplugin.PJRT_API_VERSION
  entries = (struct_size - 40) // 8
  assert entries > 100
  missing = [i for i in range(entries) if not ctypes.c_void_p.from_address(api + 40 + 8 * i).value]
  assert missing == [], f"null entries at indices {missing}"


def _error_code_and_message(api, error):
  entry = lambda slot: ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
      ctypes.c_void_p.from_address(api + 40 + 8 * slot).value)
  # PJRT_Error_GetCode_Args {struct_size, extension_start, error, code}
  get_code = (ctypes.c_uint64 * 4)(32, 0, error, 0)
  assert entry(2)(ctypes.addressof(get_code)) is None
  # PJRT_Error_Message_Args {struct_size, extension_start, error, message, message_size}
  message = (ctypes.c_uint64 * 5)(40, 0, error, 0, 0)
  entry(1)(ctypes.addressof(message))
  text = ctypes.string_at(message[3], message[4]).decode()
  destroy = (ctypes.c_uint64 * 3)(24, 0, error)
  entry(0)(ctypes.addressof(destroy))
  return ctypes.c_int32.from_buffer(get_code, 24).value, text


def test_every_entry_point_refuses_a_short_or_missing_args_struct():
  """Every entry but PJRT_Error_Destroy/Message (which cannot report an
  error) checks the caller's struct_size before reading a field: a caller
  built against an older header gets INVALID_ARGUMENT naming the entry, never
  a read past its struct."""
  api = _api_table()
  entries = (ctypes.c_size_t.from_address(api).value - 40) // 8
  invalid_argument = 3
  for slot in range(2, entries):
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(ctypes.c_void_p.from_address(api + 40 + 8 * slot).value)
    # A struct that holds only struct_size: every args struct of the C API
    # is larger. The rest of the buffer is poison that no entry may read.
    short = (ctypes.c_uint64 * 64)(8, *([0xdeadbeefdeadbeef] * 63))
    for args in (ctypes.addressof(short), None):
      error = fn(args)
      assert error, f"entry {slot} accepted a {'short' if args else 'null'} args struct"
      code, text = _error_code_and_message(api, error)
      assert code == invalid_argument, (slot, text)
      assert text.startswith("PJRT_"), text
      if args:
        assert "arguments struct is 8 bytes" in text and "older PJRT C API" in text, text
      else:
        assert "arguments struct is null" in text, text


def test_api_table_has_ffi_extension():
  api = _api_table()
  ext = ctypes.c_void_p.from_address(api + 8).value
  types = []
  while ext:
    types.append(ctypes.c_int.from_address(ext + 8).value)
    ext = ctypes.c_void_p.from_address(ext + 16).value
  assert 5 in types  # PJRT_Extension_Type_FFI


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_library_exports_only_get_pjrt_api():
  listed = run(["nm", "-D", "--defined-only", jax_plugin.library_path()], dict(os.environ), timeout=60)
  assert listed.returncode == 0, listed.stderr
  out = listed.stdout
  symbols = {line.split()[-1] for line in out.splitlines() if line.strip()}
  assert symbols == {"GetPjrtApi"}


def test_untyped_custom_calls_are_refused_clearly():
  with pytest.raises(ValueError, match="untyped custom-call API"):
    _myplugin.register_custom_call_target(jax_plugin.registration.c_api(), "legacy_target", object(), "myplugin", 0, 0)


def test_defaults_are_defined_once():
  """Every default timeout and size is C++'s (_myplugin.DEFAULTS): Python's
  signatures, the launcher and the CLI take it from there, and the
  configuration page (docs/configuration.md) is written from it by
  docs/gen_configuration.py: the page checked in is the one the script
  writes from this build's defaults, and it shows every default."""
  import importlib.util
  import inspect
  import os
  from jax_plugin import distributed
  d = _myplugin.DEFAULTS
  params = inspect.signature(distributed.initialize).parameters
  assert params["heartbeat_timeout_seconds"].default == d["heartbeat_timeout"]
  assert params["initialization_timeout"].default == d["initialization_timeout"]
  assert distributed.seconds_setting("MYPLUGIN_NO_SUCH_VARIABLE", "shutdown_timeout") == d["shutdown_timeout"]
  assert inspect.signature(distributed.recover).parameters["timeout"].default == d["agreement_timeout"]
  assert inspect.signature(distributed.agree_membership).parameters["timeout"].default == d["agreement_timeout"]

  script = os.path.join(os.path.dirname(__file__), "..", "docs", "gen_configuration.py")
  spec = importlib.util.spec_from_file_location("gen_configuration", script)
  gen = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(gen)
  assert set(d) <= gen.keys_shown()
  with open(gen.PAGE) as f:
    assert f.read() == gen.render(d), "docs/configuration.md is stale: run python docs/gen_configuration.py"
  # The page's rows, as a reader sees them.
  rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
          for line in gen.render(d).splitlines() if line.startswith("| `")}
  assert rows["`MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS`"][-1] == f"{d['collective_timeout']:g}"
  assert f"({d['min_trace_buffer']} to {d['max_trace_buffer']})" in rows["`MYPLUGIN_TRACE_BUFFER`"][0]
  # Every variable C++ reads (plugin/common/settings.h) has its row, or its
  # mention in one (TMPDIR, in the trace folder's default).
  page = gen.render(d)
  assert "MYPLUGIN_COLLECTIVE_STALL_SECONDS" in _myplugin.SETTING_VARIABLES
  for variable in _myplugin.SETTING_VARIABLES:
    assert f"`{variable}" in page or f"`${variable}`" in page, variable


def test_python_hands_its_library_choice_to_cpp():
  """The engine, its kind, the shadow engine and libnccl reach C++ through
  _myplugin.set_library_choice, not environment variables."""
  import os
  from jax_plugin import engine_selection
  engine = engine_selection.select()
  choice = _myplugin.library_choice()
  assert choice["engine_path"] == engine.path and choice["engine_kind"] == engine.kind == "cpu"
  assert choice["shadow_engine_path"] == engine_selection.shadow_engine()
  assert choice["nccl_library"] == ""  # the CPU engine loads no NCCL
  assert "MYPLUGIN_NCCL_LIBRARY" not in os.environ
  with pytest.raises(ValueError, match="engine_kind"):
    _myplugin.set_library_choice(engine_path="", engine_kind="tpu", shadow_engine_path="", nccl_library="")


def test_a_misspelt_setting_is_named_once_with_the_closest_one():
  """MYPLUGIN_NUM_DEVICE=8 (without the S) was silently ignored: one device
  and no word. Now the backend's start says so once, naming the setting
  meant; correct settings say nothing."""
  program = "import jax; print('DEVICES', len(jax.devices()))"
  r = run_python(["-c", program], child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICE="8",
                                            MYPLUGIN_TRASNPORT="gloo"), timeout=120)
  assert r.returncode == 0, r.output
  assert "DEVICES 1" in r.stdout, r.output
  assert r.stderr.count("MYPLUGIN_NUM_DEVICE is not a myplugin setting and is ignored "
                        "(did you mean MYPLUGIN_NUM_DEVICES?)") == 1, r.output
  assert "MYPLUGIN_TRASNPORT is not a myplugin setting and is ignored (did you mean MYPLUGIN_TRANSPORT?)" in r.stderr
  r = run_python(["-c", program], child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8"), timeout=120)
  assert r.returncode == 0 and "DEVICES 8" in r.stdout, r.output
  assert "not a myplugin setting" not in r.stderr, r.output


def test_every_variable_the_sources_name_is_known():
  """No false warning: every MYPLUGIN_* name that the package, the C++
  library, the tests, the benchmarks or CI read or set is a known one."""
  import re
  from jax_plugin import variables
  root = os.path.join(os.path.dirname(__file__), "..")
  named = set()
  for top in ("jax_plugin", "plugin", "tests", "bench", "ci", "examples", "fuzz"):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
      for f in files:
        if f.endswith((".py", ".cc", ".h", ".sh")):
          with open(os.path.join(dirpath, f), errors="replace") as fh:
            text = fh.read()
          named |= set(re.findall(r"[\"'`]?(MYPLUGIN_[A-Z0-9_]+)(?=[\"'`=])", text))
  named -= {"MYPLUGIN_NUM_DEVICE", "MYPLUGIN_TRASNPORT", "MYPLUGIN_NO_SUCH_VARIABLE"}  # unknown on purpose
  assert named - variables.known() == set(), sorted(named - variables.known())

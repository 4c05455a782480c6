"""Bad input gets a clear Python error: never a crash, never a hang. Each
case runs in a fresh process, since a backend is created once per process."""
import os
import textwrap

import pytest

from proc import child_env, run_python

PROBE = textwrap.dedent("""
    import jax
    try:
      jax.devices()
    except RuntimeError as e:
      print("RAISED:", e)
    else:
      print("NO ERROR", jax.devices())
""")


def probe(**env):
  r = run_python(["-c", PROBE], child_env(JAX_PLATFORMS="myplugin", **env), timeout=120)
  assert r.returncode == 0, r.output  # a Python error, not a crash
  assert "RAISED:" in r.stdout, r.output
  return r


@pytest.mark.parametrize("value", ["0", "-3", "abc", "2.5", "100000"])
def test_invalid_num_devices(value):
  r = probe(MYPLUGIN_NUM_DEVICES=value)
  assert "MYPLUGIN_NUM_DEVICES must be a whole number of devices" in r.stdout
  assert "INVALID_ARGUMENT" in r.stdout


def test_missing_engine_library_is_named(tmp_path):
  path = str(tmp_path / "no_such_engine.so")
  r = probe(MYPLUGIN_ENGINE_PATH=path)
  assert "XLA engine library not found: " + path in r.stdout
  # initialize() said so at warning level, too.
  assert "myplugin:" in r.stderr and path in r.stderr


def test_unloadable_engine_library_is_named(tmp_path):
  bogus = tmp_path / "engine.so"
  bogus.write_bytes(b"this is not an ELF file")
  r = probe(MYPLUGIN_ENGINE_PATH=str(bogus))
  assert f"cannot load XLA engine library {bogus}" in r.stdout


def test_library_without_pjrt_api_is_named():
  libm = next(p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                          "/lib64/libm.so.6", "/usr/lib/aarch64-linux-gnu/libm.so.6") if os.path.exists(p))
  r = probe(MYPLUGIN_ENGINE_PATH=libm)
  assert "is not a PJRT plugin: it does not export GetPjrtApi" in r.stdout
  assert libm in r.stdout


def test_unknown_register_option():
  r = probe(JAX_PJRT_CLIENT_CREATE_OPTIONS="num_devics:2")
  assert "unknown myplugin client option 'num_devics'" in r.stdout
  assert "accepted: num_devices" in r.stdout


def test_register_option_sets_device_count():
  code = textwrap.dedent("""
      import jax
      from jax._src import xla_bridge
      print("COUNT", len(jax.devices()))
  """)
  r = run_python(["-c", code], child_env(JAX_PLATFORMS="myplugin", JAX_PJRT_CLIENT_CREATE_OPTIONS="num_devices:3",
                                         MYPLUGIN_NUM_DEVICES="5"), timeout=120)
  assert r.returncode == 0, r.output
  assert "COUNT 3" in r.stdout  # the explicit option wins over the environment


def test_nonexistent_device():
  code = textwrap.dedent("""
      import jax
      from jax._src import xla_bridge
      from jax.experimental import mesh_utils
      assert len(jax.devices()) == 2
      try:
        xla_bridge.get_backend().device_from_local_hardware_id(5)
      except Exception as e:
        print("LOOKUP:", type(e).__name__, e)
      try:
        jax.devices()[5]
      except IndexError as e:
        print("INDEX:", e)
      try:
        mesh_utils.create_device_mesh((2, 4))
      except ValueError as e:
        print("MESH:", e)
  """)
  r = run_python(["-c", code], child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="2"), timeout=120)
  assert r.returncode == 0, r.output
  assert "LOOKUP: " in r.stdout and "no addressable device with local hardware id 5 (it has 2 local devices)" in r.stdout
  assert "INDEX:" in r.stdout and "MESH:" in r.stdout


def test_wrong_platform_name():
  r = run_python(["-c", PROBE], child_env(JAX_PLATFORMS="mypluginn"), timeout=120)
  assert r.returncode == 0, r.output
  assert "RAISED:" in r.stdout and "mypluginn" in r.stdout


# Settings C++ reads (plugin/common/settings.h): a malformed value fails the
# backend's start naming the variable, not the first collective deep in a job.
BAD_SETTINGS = [("MYPLUGIN_COLLECTIVE_STALL_SECONDS", "abc", "is not a positive number of seconds"),
                ("MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", "0", "is not a positive number of seconds"),
                ("MYPLUGIN_PEER_EXIT_GRACE_SECONDS", "-2", "is not a positive number of seconds"),
                ("MYPLUGIN_TRANSPORT", "bogus", "is not a transport: auto"),
                ("MYPLUGIN_TRACE_BUFFER", "8", "is not a whole number from 16 to 16777216"),
                ("MYPLUGIN_SPMD_REWRITE", "sometimes", "is not a rewrite mode: always")]


@pytest.mark.parametrize("name,value,words", BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
def test_bad_setting_fails_backend_start(name, value, words):
  r = probe(**{name: value})
  assert f"INVALID_ARGUMENT: {name}='{value}' {words}" in r.stdout, r.output


@pytest.mark.parametrize("name,value,words", BAD_SETTINGS[:4], ids=[b[0] for b in BAD_SETTINGS[:4]])
def test_bad_setting_fails_job_join(name, value, words):
  """A process that joins a job without a backend (jax_plugin.collectives on
  numpy arrays) is refused before it joins."""
  from job import free_port
  code = textwrap.dedent(f"""
      from jax_plugin import distributed
      try:
        distributed.initialize('127.0.0.1:{free_port()}', 1, 0)
      except Exception as e:
        print('RAISED:', e)
      print('initialized', distributed.is_initialized())
  """)
  r = run_python(["-c", code], child_env(**{name: value}), timeout=120)
  assert r.returncode == 0, r.output
  assert f"INVALID_ARGUMENT: {name}='{value}' {words}" in r.stdout, r.output
  assert "initialized False" in r.stdout, r.output

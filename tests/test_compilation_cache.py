"""jax's persistent compilation cache on myplugin: the first run of a
program writes its executables, a second run (a fresh process) loads them
instead of compiling, on one process and on 2 processes x 2 devices; the
numbers equal jax's CPU backend running the same programs; an entry of
another build or another backend is refused, never loaded."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from proc import child_env, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "cache_program.py")
PARTITIONED = "multi-process compile: partitioned"
# Shards of the saved results each process of 2 x 2 holds: 2 of each of the
# 3 programs on all devices, and process 0 both of the program on its own two.
SHARDS_2X2 = {0: 8, 1: 6}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The programs on jax's CPU backend, 4 devices, one process, no cache."""
  out = tmp_path_factory.mktemp("cpu") / "ref.npz"
  r = run_python([PROGRAM, "-", str(out)], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"), timeout=120)
  assert r.returncode == 0, r.output
  return dict(np.load(out))


def entries(cache_dir) -> list[str]:
  return sorted(f for f in os.listdir(cache_dir) if f.endswith("-cache")) if os.path.isdir(cache_dir) else []


def single(cache_dir, out, **env):
  r = run_python([PROGRAM, str(cache_dir), str(out)],
                 child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="4", **env), timeout=120)
  assert r.returncode == 0, r.output
  return r, dict(np.load(str(out).format(rank=0)))


def job(cache_dir, out, *extra):
  """2 processes x 2 devices under myplugin-run."""
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "2", "--timeout", "150", "--",
                  sys.executable, PROGRAM, str(cache_dir), str(out), *extra], child_env(MYPLUGIN_SPMD_LOG="1"),
                 timeout=180)
  assert r.returncode == 0, r.output
  return r, [dict(np.load(str(out).format(rank=rank))) for rank in range(2)]


def assert_matches(got: dict, reference: dict, shards: int):
  compared = [k for k in got if ".shard." in k]
  assert len(compared) == shards, sorted(got)
  for key in compared:
    np.testing.assert_allclose(got[key], reference[key], rtol=1e-5, atol=1e-5, err_msg=key)
  np.testing.assert_allclose(got["local"], reference["local"], rtol=1e-5, atol=1e-5)
  assert bool(got["whole_program"])


def test_second_run_loads_every_program_from_the_cache(tmp_path, reference):
  cache = tmp_path / "cache"
  r1, first = single(cache, tmp_path / "first.npz")
  written = entries(cache)
  assert len(written) >= 5, written  # the four mesh programs, the local one (and jax's helpers)
  assert int(first["hits"]) == 0 and int(first["misses"]) >= 4
  assert_matches(first, reference, shards=14)

  r2, second = single(cache, tmp_path / "second.npz")
  assert int(second["misses"]) == 0, r2.output
  assert int(second["hits"]) == int(first["misses"]), r2.output
  assert entries(cache) == written  # nothing new was compiled and written
  assert_matches(second, reference, shards=14)


@pytest.mark.parametrize("bootstrap", [[], ["jax.distributed"]], ids=["myplugin-run", "jax.distributed"])
def test_two_processes_of_two_devices_hit_on_every_process(tmp_path, reference, bootstrap):
  """The cached local programs are the same on both processes (partition-id
  is read at run time), so whichever process wrote an entry, both load it
  and compute their own shards: on meshes that put each process's devices
  at different positions, with psum, pmax, ppermute and axis_index. A
  program on process 0's devices alone is process 0's own entry, which
  process 1 (outside it) loads as the whole program. Started by
  myplugin-run alone, and through jax.distributed.initialize()."""
  cache = tmp_path / "cache"
  r1, first = job(cache, tmp_path / "first.{rank}.npz", *bootstrap)
  assert PARTITIONED in r1.output, r1.output
  assert len(entries(cache)) >= 4
  for rank in range(2):
    # Both processes compile the same programs at about the same time; one
    # may already find the other's entry (a hit) if it was late enough.
    assert int(first[rank]["hits"]) + int(first[rank]["misses"]) >= 4
    assert_matches(first[rank], reference, shards=SHARDS_2X2[rank])

  r2, second = job(cache, tmp_path / "second.{rank}.npz", *bootstrap)
  assert PARTITIONED not in r2.output, r2.output  # no multi-process program compiled again
  for rank in range(2):
    # Where jax knows the process ids (jax.distributed), it lets only process
    # 0 write, so process 1's program of its own device alone is never
    # cached (jax's rule).
    unwritten = 1 if int(first[rank]["jax_process_id"]) != 0 else 0
    assert int(second[rank]["misses"]) == unwritten, r2.output
    assert int(second[rank]["hits"]) == int(first[rank]["hits"]) + int(first[rank]["misses"]) - unwritten, r2.output
    assert_matches(second[rank], reference, shards=SHARDS_2X2[rank])


def _rewrite_entries(cache_dir, change) -> int:
  """Applies `change` to our serialized executable inside every entry."""
  from jax._src import compilation_cache as cc
  n = 0
  for name in entries(cache_dir):
    path = os.path.join(cache_dir, name)
    with open(path, "rb") as f:
      raw = cc.decompress_executable(f.read())
    # jax's compile time, jaxlib's metadata, then our bytes.
    ours = raw.find(b"myplugin-exec\n")
    assert ours > 0, raw[:200]
    with open(path, "wb") as f:
      f.write(cc.compress_executable(raw[:ours] + change(raw[ours:])))
    n += 1
  return n


def _other_build(blob: bytes) -> bytes:
  m = re.search(rb"\(build ([0-9a-f]{16})\)", blob)
  assert m, blob[:200]
  other = bytes(b"0123456789abcdef"[(b"0123456789abcdef".index(c) + 1) % 16] for c in m.group(1))
  return blob[:m.start(1)] + other + blob[m.end(1):]


@pytest.mark.parametrize("change,message", [
    (_other_build, "this serialized executable was written by 'myplugin"),
    (lambda blob: b"\x08\x01 an executable of another backend", "not a serialized myplugin executable"),
])
def test_an_entry_of_another_build_or_backend_is_refused(tmp_path, reference, change, message):
  cache = tmp_path / "cache"
  _, first = single(cache, tmp_path / "first.npz")
  assert _rewrite_entries(cache, change) >= 4
  r, second = single(cache, tmp_path / "second.npz")
  # jax reports the refusal and compiles instead.
  assert message in r.output, r.output
  assert "Error reading persistent compilation cache entry" in r.output, r.output
  assert int(second["hits"]) == 0 and int(second["misses"]) == int(first["misses"]), r.output
  assert_matches(second, reference, shards=14)


def _process_specific(blob: bytes) -> bytes:
  """Marks a multi-process entry's local program as made for the writer's
  devices alone (what the CUDA engine's programs are): our envelope is
  magic (16) | version u64 | platform version | multiprocess u64 | engine
  bytes | process_independent u64 | …, byte strings as u64 length + bytes."""
  u64 = lambda at: int.from_bytes(blob[at:at + 8], "little")
  at = 16 + 8
  at += 8 + u64(at)  # platform version
  if u64(at) == 0:
    return blob  # a program of one process
  at += 8
  at += 8 + u64(at)  # the engine's executable
  assert u64(at) == 1, "the local programs of the CPU engine are process-independent"
  return blob[:at] + (0).to_bytes(8, "little") + blob[at + 8:]


def test_an_entry_made_for_another_process_devices_is_refused_there(tmp_path, reference):
  """An entry whose local program holds the writer's device ids loads on the
  writer's devices only: every other process refuses it, names both device
  lists and compiles; every shard stays right."""
  cache = tmp_path / "cache"
  _, first = job(cache, tmp_path / "first.{rank}.npz")
  assert _rewrite_entries(cache, _process_specific) >= 4
  r, second = job(cache, tmp_path / "second.{rank}.npz")
  assert "holds the local program of the process with devices" in r.output, r.output
  assert "reads device ids as constants" in r.output, r.output
  refused = sum(int(second[rank]["misses"]) for rank in range(2))
  assert refused >= 3, r.output  # each of the 3 mesh programs on one of the processes at least
  for rank in range(2):
    assert_matches(second[rank], reference, shards=SHARDS_2X2[rank])


def test_a_job_of_another_shape_misses_instead_of_reading_entries_it_cannot_run(tmp_path, reference):
  """Entries written by a job of 2 processes x 2 devices, then one process
  of 4 devices on the same cache: a miss for every mesh program (the
  platform version names the job's shape, which jax's key covers), never an
  entry read and refused ("Error reading persistent compilation cache
  entry"), and every result right."""
  cache = tmp_path / "cache"
  job(cache, tmp_path / "first.{rank}.npz")
  written = len(entries(cache))
  r, got = single(cache, tmp_path / "single.npz")
  assert "Error reading persistent compilation cache entry" not in r.output, r.output
  assert "holds the local program" not in r.output, r.output
  assert int(got["hits"]) == 0 and int(got["misses"]) >= 4, r.output
  assert len(entries(cache)) > written  # the single process's own entries, beside the job's
  assert_matches(got, reference, shards=14)


def test_the_platform_version_names_the_build_and_the_engine():
  r = run_python(["-c", "import jax; print(jax.devices()[0].client.platform_version)"],
                 child_env(JAX_PLATFORMS="myplugin"), timeout=60)
  assert r.returncode == 0, r.output
  assert re.search(r"myplugin \S+ \(build [0-9a-f]{16}\) over XLA engine 'cpu' \S+", r.stdout), r.stdout


def test_the_rewrite_reads_device_ids_at_run_time_when_asked():
  """With runtime_device_ids the local program is the same whatever this
  process's devices are: partition-id is our handler with a table indexed
  by global device id."""
  from jax_plugin.spmd.rewrite import rewrite_module
  text = ("HloModule m, num_partitions=4\n\nENTRY %main (p: f32[]) -> u32[] {\n"
          "  %p = f32[] parameter(0)\n  ROOT %i = u32[] partition-id()\n}\n")
  outs = {tuple(order): rewrite_module(text, [[5, 4, 7, 6]], 8, local_order=order, runtime_device_ids=True)
          for order in ([5, 4], [7, 6])}
  assert len(set(outs.values())) == 1
  out = next(iter(outs.values()))
  assert 'custom_call_target="myplugin_partition_id"' in out, out
  assert "ids = dense<[-1, -1, -1, -1, 1, 0, 3, 2]>" in out, out
  assert "replica-id()" not in out and "constant(" not in out, out


def test_a_program_with_a_host_callback_runs_and_is_not_written(tmp_path):
  """A program that calls a Python host callback (a callable of this
  process) compiles and runs as usual; no entry is written for it (a debug
  line says why), and serializing it directly is a clear UNIMPLEMENTED."""
  cache = tmp_path / "cache"
  # pure_callback places its operands on jax's CPU backend.
  r = run_python([os.path.join(HERE, "programs", "cache_callback_program.py"), str(cache)],
                 child_env(JAX_PLATFORMS="myplugin,cpu"), timeout=120)
  assert r.returncode == 0, r.output
  assert "RESULT value [1.0, 3.0, 5.0, 7.0]" in r.stdout, r.output
  # jax's own skip (our lowering hands jax the callbacks), or ours.
  assert re.search(r"DEBUG:jax\S*:Not writing persistent cache entry for 'jit_with_pure_callback' because it "
                   r"(calls xla_ffi_python_cpu_callback|uses host callbacks)", r.stderr), r.output
  assert not [e for e in entries(cache) if e.startswith("jit_with_")], entries(cache)
  assert ("RESULT serialize JaxRuntimeError UNIMPLEMENTED: this executable cannot be serialized: the program calls "
          "xla_ffi_python_cpu_callback") in r.stdout, r.output


def test_programs_with_process_local_callbacks_are_not_written(caplog):
  """The hook itself: a compiled program that calls a Python host callback
  of this process is not written, with a debug log line; others are."""
  import logging

  from jax._src import compilation_cache as cc
  from jax_plugin import persistent_cache

  class Module:
    def __init__(self, text):
      self.text = text

    def to_string(self):
      return self.text

  class Executable:
    def __init__(self, text, devices=("a device",)):
      self.modules = [Module(text)]
      self.devices = list(devices)

    def hlo_modules(self):
      return self.modules

    def local_devices(self):
      return self.devices

  class Backend:
    platform = "myplugin"

  written = []
  saved = (cc.is_cache_used, cc.put_executable_and_time)
  try:
    # Fresh functions in jax's places, whether or not the hooks were installed before.
    cc.is_cache_used = lambda backend: False
    cc.put_executable_and_time = lambda key, name, exe, backend, t: written.append(name)
    assert persistent_cache.enable("myplugin")
    with caplog.at_level(logging.DEBUG, logger="jax_plugin"):
      cc.put_executable_and_time("k1", "with_callback", Executable(
          '%c = f32[] custom-call(), custom_call_target="xla_ffi_python_cpu_callback"'), Backend(), 1)
      cc.put_executable_and_time("k2", "plain", Executable("%a = f32[] add(%x, %y)"), Backend(), 1)
      cc.put_executable_and_time("k3", "elsewhere", Executable("%a = f32[] add(%x, %y)", devices=()), Backend(), 1)
  finally:
    cc.is_cache_used, cc.put_executable_and_time = saved
  assert written == ["plain"]
  assert "Not writing persistent cache entry for 'with_callback' because it calls xla_ffi_python_cpu_callback" in caplog.text
  assert "Not writing persistent cache entry for 'elsewhere' because it has no device on this process" in caplog.text

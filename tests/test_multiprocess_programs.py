"""Unmodified multi-process JAX programs (jit over a global mesh, shard_map,
pmap) on myplugin, launched with myplugin-run, against jax's own CPU backend
running the same program in one process with 8 devices."""
from __future__ import annotations

import ast
import os
import re
import sys
import time

import numpy as np
import pytest

from proc import child_env, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
LAYOUTS = [(2, 4), (4, 2)]


def launch(n, d, program, *args, timeout=300, **env):
  """`myplugin-run -n N --devices-per-process D -- python PROGRAM ARGS`."""
  r = run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--devices-per-process", str(d), "--",
                  sys.executable, program, *args], child_env(**env), timeout=timeout)
  assert r.returncode == 0, r.output
  return r


def on_cpu(program, *args):
  r = run_python([program, *args], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8"), timeout=240)
  assert r.returncode == 0, r.output
  return r


def load(path):
  return dict(np.load(path))


@pytest.fixture(scope="module")
def seed_reference(tmp_path_factory):
  out = tmp_path_factory.mktemp("cpu") / "seed.npz"
  on_cpu(os.path.join(PROGRAMS, "seed_sharded_computation.py"), str(out))
  return load(out)


def test_seed_pmap_four_processes_of_two_devices(tmp_path):
  out = str(tmp_path / "pmap.{rank}.npz")
  launch(4, 2, os.path.join(PROGRAMS, "seed_pmap.py"), out)
  for rank in range(4):
    got = load(out.format(rank=rank))
    # device_count, local_device_count, process_index, process_count
    np.testing.assert_array_equal(got["counts"], [8, 2, rank, 4])
    np.testing.assert_array_equal(got["psum"], [8.0, 8.0])
    assert str(got["platform"]) == "myplugin"


def test_closure_constants_reach_the_engine_whole(tmp_path):
  """A training step whose data are closure constants: the partitioned
  module's dump once elided large constants ("{...}"), which parsed back as
  other values, and the weights never moved (a wrong result, no error)."""
  ref = str(tmp_path / "cpu.{rank}.npz")
  r = run_python([os.path.join(PROGRAMS, "closure_constants.py"), ref],
                 child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"), timeout=240)
  assert r.returncode == 0, r.output
  want = load(ref.format(rank=0))
  assert want["losses"][-1] < want["losses"][0] * 0.9  # it trains
  out = str(tmp_path / "ours.{rank}.npz")
  launch(2, 2, os.path.join(PROGRAMS, "closure_constants.py"), out)
  for rank in range(2):
    got = load(out.format(rank=rank))
    assert str(got["platform"]) == "myplugin"
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-5)
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-5, atol=1e-6)


def test_pmap_of_prng_keys_across_processes(tmp_path):
  """Threefry's loop constants once made the partition step's CPU compile
  abort the process (copy insertion was skipped there, and buffer
  assignment then gave two constants one buffer)."""
  ref = str(tmp_path / "cpu.{rank}.npz")
  r = run_python([os.path.join(PROGRAMS, "pmap_prng.py"), ref],
                 child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"), timeout=240)
  assert r.returncode == 0, r.output
  want = load(ref.format(rank=0))["normal"]
  assert len({tuple(row) for row in want.tolist()}) == 4  # every device's key differs
  out = str(tmp_path / "ours.{rank}.npz")
  launch(2, 2, os.path.join(PROGRAMS, "pmap_prng.py"), out)
  for rank in range(2):
    got = load(out.format(rank=rank))
    assert str(got["platform"]) == "myplugin"
    np.testing.assert_allclose(got["normal"], want[2 * rank:2 * rank + 2], rtol=1e-6)


@pytest.mark.parametrize("n,d", LAYOUTS)
def test_sharded_computation_seed_across_processes(tmp_path, seed_reference, n, d):
  """Every example of the seed on a global 8-device mesh: each process's
  shards equal the single-process result at the same index."""
  out = str(tmp_path / "seed.{rank}.npz")
  r = launch(n, d, os.path.join(PROGRAMS, "seed_sharded_computation.py"), out)
  assert "shardings match: True" in r.stdout
  checked = set()
  for rank in range(n):
    got = load(out.format(rank=rank))
    local = {rank * d + j for j in range(d)}
    for key, value in got.items():
      if key.endswith(".layout"):
        name = key[:-len(".layout")]
        if not any(k.startswith(name + ".shard.") for k in got):
          continue  # an array of this process alone (on its first device): compared by value below
        ref_layout = [t for t in ast.literal_eval(str(seed_reference[key])) if t[0] in local]
        assert ast.literal_eval(str(value)) == ref_layout, key
        continue
      m = re.fullmatch(r"(.*)\.shard\.(\d+)", key)
      if m:
        name, device = m.group(1), int(m.group(2))
        assert device in local, key
        index = eval(str(got[f"{name}.index.{device}"]), {"slice": slice})  # e.g. (slice(0, 2, None),)
        np.testing.assert_allclose(value, seed_reference[name][index], rtol=1e-6, atol=1e-6, err_msg=key)
        checked.add(name)
      elif ".index." not in key:
        np.testing.assert_allclose(value, seed_reference[key], rtol=1e-6, atol=1e-6, err_msg=key)
        checked.add(key)
  # Every example was compared, sharded ones included.
  expected = {k for k in seed_reference if not k.endswith(".layout") and k != "local_shape"}
  assert expected <= checked, expected - checked
  assert {"f_contract", "f_contract_2", "shard_map_psum", "layer_shard_map", "layer_auto"} <= checked


def test_rewrite_path_inside_one_process(tmp_path, seed_reference):
  """MYPLUGIN_SPMD_REWRITE=always sends the seed's programs through the
  partition-rewrite-compile path inside one process: same results."""
  out = tmp_path / "seed.npz"
  r = run_python([os.path.join(PROGRAMS, "seed_sharded_computation.py"), str(out)],
                 child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8", MYPLUGIN_SPMD_REWRITE="always",
                           MYPLUGIN_SPMD_LOG="1"), timeout=240)
  assert r.returncode == 0, r.output
  assert "multi-process compile: partitioned for 8 devices" in r.stderr
  got = load(out)
  for key, want in seed_reference.items():
    if want.dtype.kind in "iubU":
      np.testing.assert_array_equal(got[key], want, err_msg=key)
    else:
      np.testing.assert_allclose(got[key], want, rtol=1e-6, atol=1e-6, err_msg=key)


SHARD_MAP_EXAMPLE = os.path.join(EXAMPLES, "shard_map_collectives.py")


@pytest.fixture(scope="module")
def shard_map_reference(tmp_path_factory):
  """The example on jax's CPU backend with 8 devices: one run serves every layout."""
  ref_path = tmp_path_factory.mktemp("cpu") / "ref.npz"
  on_cpu(SHARD_MAP_EXAMPLE, "--save", str(ref_path))
  return load(ref_path)


@pytest.mark.parametrize("n,d", LAYOUTS)
def test_shard_map_collectives_across_processes(tmp_path, shard_map_reference, n, d):
  example, ref = SHARD_MAP_EXAMPLE, shard_map_reference
  out = str(tmp_path / "sm.{rank}.npz")
  launch(n, d, example, "--save", out)
  seen = set()
  for rank in range(n):
    got = load(out.format(rank=rank))
    for key, value in got.items():
      np.testing.assert_allclose(value, ref[key], rtol=1e-6, err_msg=f"rank {rank}: {key}")
      seen.add(key.split(".")[0])
  assert seen == {k.split(".")[0] for k in ref}
  assert {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute", "all_to_all", "axis_index",
          "grid_psum_a", "loop"} <= seen


def test_data_parallel_training_matches_one_process():
  """20 steps, batch over both processes' devices, parameters replicated."""
  example = os.path.join(EXAMPLES, "train_mlp.py")
  ref = [float(v) for v in re.findall(r"loss ([0-9.]+)", on_cpu(example).stdout)]
  r = launch(2, 4, example)
  assert len(ref) == 20
  for rank in range(2):
    losses = [float(v) for v in re.findall(rf"\[{rank}\] step +\d+ +loss ([0-9.]+)", r.stdout)]
    np.testing.assert_allclose(losses, ref, rtol=1e-5, err_msg=f"rank {rank}")
  assert ref[-1] < ref[0]


def test_partition_step_is_cached(tmp_path):
  """The same program compiled twice is partitioned once (its local part
  compiled each time: MYPLUGIN_SPMD_LOG shows every step)."""
  prog = tmp_path / "twice.py"
  prog.write_text(
      "import jax, jax.numpy as jnp, numpy as np\n"
      "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
      "mesh = Mesh(np.array(jax.devices()), ('i',))\n"
      "x = jax.make_array_from_callback((8,), NamedSharding(mesh, P('i')), lambda i: np.arange(8.0)[i])\n"
      "for _ in range(2):\n"
      "  print('sum', float(jax.jit(lambda v: v.sum()).lower(x).compile()(x)))\n")
  r = launch(2, 4, str(prog), MYPLUGIN_SPMD_LOG="1")
  assert r.stdout.count("sum 28.0") == 4, r.output
  for rank in range(2):
    lines = [l for l in r.output.splitlines() if l.startswith(f"[{rank}] myplugin: multi-process compile")]
    # Each compile compiles the local part; only the first partitions.
    assert len(lines) == 4, r.output
    assert "partitioned for 8 devices" in lines[0] and "cache" in lines[2], r.output
    assert "local part compiled" in lines[1] and "local part compiled" in lines[3], r.output


HEARTBEAT = 3


@pytest.mark.parametrize("mode,cause", [
    ("shapes", "collective mismatch"),
    ("programs", "collective mismatch"),
    ("last_batch", "did one leave its loop early?"),
])
def test_pitfalls_end_every_process_with_the_cause(mode, cause):
  """The seed documents' pitfalls: an error on every process, never a hang."""
  from job import Job
  env = {"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2", "MYPLUGIN_HEARTBEAT_TIMEOUT": str(HEARTBEAT)}
  with Job(2, [mode], program="pitfalls_worker.py", env=env) as job:
    job.wait_event("started")
    t0 = time.monotonic()
    codes = job.wait(timeout=10 + HEARTBEAT + 60)
    out = job.all_output()
    assert codes[0] != 0 and codes[1] != 0, out
    for rank in range(2):
      assert cause in job.output(rank), out
      assert job.exit_times[rank] - t0 < 10 + HEARTBEAT, out
    errors = [job.event(r, "error") for r in range(2) if job.event(r, "error")]
    if mode == "last_batch":
      assert "process 1" in job.output(0), out  # the one that left
    else:  # both raise, and each is told what the other issued
      assert len(errors) == 2, out
      assert all("process 0" in e["error"] and "process 1" in e["error"] for e in errors), out
      # jaxlib raised its own error for the program's collective;
      # jax_plugin.errors.typed gives the mismatch the runtime recorded.
      for rank in range(2):
        e = job.event(rank, "error")
        assert (e["class"], e["processes"], e["jax_error"]) == ("CollectiveMismatch", [1 - rank], True), e
        assert isinstance(e["call"], int) and e["collective"] in e["error"], e


def test_unsupported_construct_is_an_unimplemented_compile_error():
  """A construct the rewrite refuses fails the compile with UNIMPLEMENTED and
  the rewrite's words; nothing runs. (The path is forced inside one process;
  the refusal itself is injected, as jax lowers none of those constructs on
  CPU: see test_spmd_rewrite for what is refused.)"""
  code = (
      "import jax, jax.numpy as jnp\n"
      "from jax_plugin import _myplugin\n"
      "from jax_plugin.spmd import compile_hooks\n"
      "from jax_plugin.spmd.rewrite import UnsupportedProgram\n"
      "jax.devices()\n"
      "def refuse(*args):\n"
      "  raise UnsupportedProgram('the program uses collective-broadcast (%cb), which myplugin cannot run')\n"
      "_myplugin.set_program_hooks(compile_hooks.shadow_program, refuse, UnsupportedProgram)\n"
      "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
      "import numpy as np\n"
      "mesh = Mesh(np.array(jax.devices()), ('i',))\n"
      "x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P('i')))\n"
      "try:\n"
      "  jax.jit(lambda v: v.sum())(x)\n"
      "  print('NO ERROR')\n"
      "except Exception as e:\n"
      "  print('ERROR', e)\n")
  r = run_python(["-c", code], child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8",
                                         MYPLUGIN_SPMD_REWRITE="always"), timeout=120)
  assert r.returncode == 0, r.output
  assert "ERROR UNIMPLEMENTED" in r.stdout and "collective-broadcast (%cb)" in r.stdout, r.output


def test_the_whole_program_answers_come_from_the_partition_that_stopped_early(tmp_path):
  """The shadow's compile ends after its HLO passes (MYPLUGIN_SPMD_LOG says
  so), and what jax reads back about the whole program (output and input
  shardings the partitioner chose, the partition count in its module) and
  every shard equal jax's CPU backend running the same program."""
  program = os.path.join(PROGRAMS, "whole_program_answers.py")
  ref_out = str(tmp_path / "cpu.{rank}.npz")
  on_cpu(program, ref_out)
  reference = load(ref_out.format(rank=0))
  out = str(tmp_path / "mp.{rank}.npz")
  r = launch(2, 4, program, out, MYPLUGIN_SPMD_LOG="1")
  assert "stopped after the HLO passes" in r.output, r.output
  assert "partitioning again in full" not in r.output, r.output
  compared = 0
  for rank in range(2):
    got = load(out.format(rank=rank))
    for key, value in got.items():
      if key.endswith((".partitions", ".no_mark")):
        assert bool(value), key
      elif key.endswith("_specs"):
        assert str(value) == str(reference[key]), (key, str(value), str(reference[key]))
      else:
        np.testing.assert_allclose(value, reference[key], rtol=1e-5, atol=1e-5, err_msg=key)
        compared += 1
  assert compared == sum(1 for k in reference if ".shard." in k)


def _step_calls(dump, target="myplugin_all_reduce", module="jit_step"):
  """The calls of `target` in each process's rewritten `module` (MYPLUGIN_DUMP_REWRITTEN)."""
  counts = []
  for path in sorted(dump.glob("rewritten.*.txt")):
    modules = ["HloModule" + m for m in path.read_text().split("HloModule")[1:]]
    [step] = {m for m in modules if m.split()[1].startswith(module)}
    counts.append(step.count(f'custom_call_target="{target}"'))
  return counts


def test_a_training_step_issues_as_many_all_reduces_as_xla_with_the_same_losses(tmp_path):
  """A 4-layer MLP's data-parallel step (8 parameter arrays) over 2
  processes of 2 devices: the losses of jax's CPU backend, and as many
  all-reduce calls in the rewritten step as all-reduces in XLA's own
  compile of it on 4 devices (its all-reduce combiner); with combining off
  (threshold 0), one per gradient and one for the loss, and the same
  losses."""
  program = os.path.join(PROGRAMS, "train_deep_mlp.py")
  r = run_python([program, "--count"], child_env(JAX_PLATFORMS="cpu",
                                                 XLA_FLAGS="--xla_force_host_platform_device_count=4"), timeout=240)
  assert r.returncode == 0, r.output
  xla = int(re.search(r"all-reduces (\d+)", r.stdout).group(1))
  ref = [float(v) for v in re.findall(r"loss ([0-9.]+)", r.stdout)]
  assert len(ref) == 10 and ref[-1] < ref[0]
  for threshold, want in ((None, xla), ("0", 9)):
    dump = tmp_path / f"threshold-{threshold}"
    dump.mkdir()
    env = {"MYPLUGIN_DUMP_REWRITTEN": str(dump)}
    if threshold is not None:
      env["MYPLUGIN_COMBINE_THRESHOLD_BYTES"] = threshold
    out = launch(2, 2, program, **env)
    for rank in range(2):
      losses = [float(v) for v in re.findall(rf"\[{rank}\] step +\d+ +loss ([0-9.]+)", out.stdout)]
      np.testing.assert_allclose(losses, ref, rtol=1e-5, err_msg=f"rank {rank}, threshold {threshold}")
    assert _step_calls(dump) == [want, want], (threshold, xla)
  assert xla == 1


def test_combined_gathers_scatters_and_sums_match_one_process(tmp_path):
  """Two all-gathers of two types and dimensions, two reduce-scatters and
  three psums in one program, over 2 processes of 2 devices: one call per
  kind, and every shard equals jax's CPU backend on 4 devices."""
  program = os.path.join(PROGRAMS, "combined_collectives.py")
  ref_out = str(tmp_path / "cpu.{rank}.npz")
  r = run_python([program, ref_out], child_env(JAX_PLATFORMS="cpu",
                                               XLA_FLAGS="--xla_force_host_platform_device_count=4"), timeout=240)
  assert r.returncode == 0, r.output
  ref = load(ref_out.format(rank=0))
  dump = tmp_path / "dump"
  dump.mkdir()
  out = str(tmp_path / "mp.{rank}.npz")
  launch(2, 2, program, out, MYPLUGIN_DUMP_REWRITTEN=str(dump))
  for target in ("myplugin_all_gather", "myplugin_reduce_scatter", "myplugin_all_reduce"):
    assert _step_calls(dump, target, "jit_body") == [1, 1], target
  compared = 0
  for rank in range(2):
    for key, value in load(out.format(rank=rank)).items():
      np.testing.assert_allclose(value, ref[key], rtol=1e-6, err_msg=f"rank {rank}: {key}")
      compared += 1
  assert compared == len(ref)


def test_fsdp_step_sends_its_gradients_as_reduce_scatters_and_matches_one_process(tmp_path):
  """An FSDP step (2 layers: 4 weights sharded by rows) over 2 processes
  of 2 devices: the partitioner's all-reduce and slice of each gradient
  becomes a reduce-scatter (the loss stays an all-reduce), and the losses
  and every device's final rows equal jax's CPU backend on 4 devices; with
  MYPLUGIN_FORM_REDUCE_SCATTERS=0, the all-reduces come back and so do the
  same numbers."""
  program = os.path.join(PROGRAMS, "fsdp_step.py")
  ref_out = str(tmp_path / "cpu.{rank}.npz")
  r = run_python([program, ref_out], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"), timeout=240)
  assert r.returncode == 0, r.output
  ref = load(ref_out.format(rank=0))
  for form, scatters, reduces in (("1", 4, 1), ("0", 0, 5)):
    dump = tmp_path / f"dump-{form}"
    dump.mkdir()
    out = str(tmp_path / f"mp-{form}.{{rank}}.npz")
    launch(2, 2, program, out, MYPLUGIN_DUMP_REWRITTEN=str(dump), MYPLUGIN_COMBINE_THRESHOLD_BYTES="0",
           MYPLUGIN_FORM_REDUCE_SCATTERS=form)
    assert _step_calls(dump, "myplugin_reduce_scatter") == [scatters] * 2, form
    assert _step_calls(dump, "myplugin_all_reduce") == [reduces] * 2, form
    compared = 0
    for rank in range(2):
      for key, value in load(out.format(rank=rank)).items():
        np.testing.assert_allclose(value, ref[key], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}: {key}, form {form}")
        compared += 1
    assert compared == 2 + len([k for k in ref if k != "loss"])


def test_ragged_all_to_all_is_refused_on_cpus_as_jax_refuses_it():
  """lax.ragged_all_to_all across processes runs on GPUs only: on the CPU
  engine the compile fails on every process with UNIMPLEMENTED saying so
  and what to do (the job ends at once, nothing runs). jax's CPU backend
  refuses the same program too (XLA's CPU engine has no ragged all-to-all)."""
  program = os.path.join(PROGRAMS, "moe_ragged.py")
  cpu = run_python([program], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"), timeout=240)
  assert cpu.returncode != 0 and "ragged-all-to-all` is not supported by XLA:CPU" in cpu.output, cpu.output[-3000:]
  started = time.monotonic()
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "2", "--",
                  sys.executable, program], child_env(), timeout=240)
  assert r.returncode != 0 and "MOE OK" not in r.stdout, r.output[-3000:]
  said = "UNIMPLEMENTED: rewriting the partitioned program: the program uses lax.ragged_all_to_all"
  assert r.output.count(said) >= 2, r.output[-4000:]  # each process's own traceback
  assert "myplugin runs it on GPUs" in r.output and "lax.all_to_all instead" in r.output, r.output[-3000:]
  assert time.monotonic() - started < 120

"""Multi-process jobs whose processes share one GPU (issue 39): how they
are launched, their references on jax's CPU backend, and the checks of
their results. tests/gpu/test_nccl_shared_gpu.py runs them on a GPU
(MYPLUGIN_ENGINE=cuda: NCCL between the processes); tests/test_gpu_kit.py
runs the same programs and checks on myplugin's CPU engine, where the
sharing variables change nothing but the device count (one per process).

Every process has a hard deadline and its process group is killed on the
way out (tests/proc.py, tests/job.py).
"""
from __future__ import annotations

import os
import re
import signal
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
PROGRAMS = os.path.join(TESTS, "programs")
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, TESTS)
sys.path.insert(0, HERE)

from numerics import RTOL  # noqa: E402
from proc import child_env, run_python  # noqa: E402

PROCESS_COUNTS = (2, 4)
# Collectives of small integers and their sums are exact in float32; the
# training programs' matmuls run as TF32 on NVIDIA GPUs: numerics.py's float32 bound.
TOLERANCE = RTOL["float32"]


def rank_env(rank: int, n: int) -> dict[str, str]:
  """What myplugin-run --share-gpu gives rank `rank` of n, for jobs
  started one by one (tests/job.py)."""
  from jax_plugin import gpu_sharing
  return gpu_sharing.rank_environment(rank, n, gpu=0, environ={})


def launch(n: int, program: str, *args: str, launcher_options=(), timeout: float = 240, **env):
  """`myplugin-run -n N --share-gpu -- python PROGRAM ARGS`; returns the Result (any exit code)."""
  return run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--share-gpu", *launcher_options, "--",
                     sys.executable, program, *args], child_env(**env), timeout=timeout)


def on_cpu(n: int, program: str, *args: str, timeout: float = 240):
  """The same program in one process on jax's CPU backend with n devices."""
  r = run_python([program, *args], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(n)), timeout=timeout)
  assert r.returncode == 0, r.output
  return r


def compare_blocks(got: dict[int, dict], want: dict, tolerance: float = TOLERANCE) -> list[str]:
  """Each rank's saved blocks against the reference's of the same name
  (NAME.DEVICE_ID); every reference block must be held by some rank.
  Returns the differences, one line each (empty: all equal)."""
  problems = []
  seen = set()
  for rank, blocks in sorted(got.items()):
    for key, value in sorted(blocks.items()):
      if key not in want:
        problems.append(f"rank {rank}: {key} is not in the reference")
        continue
      seen.add(key)
      ref = np.asarray(want[key])
      value = np.asarray(value)
      if value.shape != ref.shape:
        problems.append(f"rank {rank}: {key} has shape {value.shape}, the reference {ref.shape}")
      elif not np.allclose(value, ref, rtol=tolerance, atol=tolerance * max(float(np.max(np.abs(ref), initial=0)), 1)):
        problems.append(f"rank {rank}: {key} differs by {float(np.max(np.abs(value - ref))):.3g}")
  problems += [f"{key}: no rank holds it" for key in sorted(set(want) - seen)]
  return problems


def losses(text: str, rank: int | None = None) -> list[float]:
  """`loss <value>` per step, of one rank's prefixed lines (myplugin-run's `[rank]`) or of all."""
  prefix = rf"\[{rank}\] " if rank is not None else ""
  return [float(v) for v in re.findall(prefix + r"step +\d+ +loss ([0-9.]+)", text)]


def rewritten_calls(dump: str, module_prefix: str) -> list[dict[str, int]]:
  """Per process (MYPLUGIN_DUMP_REWRITTEN's rewritten.<rank>.txt), the
  myplugin_* collective calls in each rewritten module whose name starts
  with module_prefix, summed over those modules."""
  out = []
  for name in sorted(f for f in os.listdir(dump) if re.fullmatch(r"rewritten\.\d+\.txt", f)):
    with open(os.path.join(dump, name)) as f:
      modules = ["HloModule" + m for m in f.read().split("HloModule")[1:]]
    counts: dict[str, int] = {}
    for m in modules:
      if m.split()[1].startswith(module_prefix):
        for target in re.findall(r'custom_call_target="(myplugin_[a-z_]+)"', m):
          counts[target] = counts.get(target, 0) + 1
    out.append(counts)
  return out


# The collective calls the rewrite makes: each must appear in the programs checked.
COLLECTIVE_TARGETS = {"myplugin_all_reduce", "myplugin_all_gather", "myplugin_reduce_scatter", "myplugin_all_to_all",
                      "myplugin_collective_permute"}


def _load(path: str) -> dict:
  with np.load(path) as f:
    return dict(f)


def check_collectives(n: int, tmp: str, *, programs=("every_collective", "shard_map_collectives"),
                      **env) -> None:
  """Every collective through pmap and jit (every_collective.py) and through
  shard_map (examples/shard_map_collectives.py) across n processes, each
  block equal to jax's CPU backend on n devices; the rewritten programs hold
  each of the rewrite's collective calls."""
  dump = os.path.join(tmp, f"dump-{n}")
  os.makedirs(dump, exist_ok=True)
  for program, argv in ((os.path.join(PROGRAMS, "every_collective.py"), ["{out}"]),
                        (os.path.join(EXAMPLES, "shard_map_collectives.py"), ["--save", "{out}"])):
    name = os.path.basename(program)[:-3]
    if name not in programs:
      continue
    ref = os.path.join(tmp, f"{name}-cpu-{n}.npz")
    on_cpu(n, program, *[a.format(out=ref) for a in argv])
    out = os.path.join(tmp, f"{name}-{n}.{{rank}}.npz")
    r = launch(n, program, *[a.format(out=out) for a in argv], MYPLUGIN_DUMP_REWRITTEN=dump,
               **env)
    assert r.returncode == 0, r.output
    got = {rank: _load(out.format(rank=rank)) for rank in range(n)}
    if name == "shard_map_collectives":  # its one replicated scalar is saved without a device
      want = _load(ref)
      for rank in got:
        np.testing.assert_allclose(got[rank].pop("loop"), want["loop"], rtol=TOLERANCE, err_msg=f"rank {rank}")
      want.pop("loop")
    else:
      want = _load(ref)
    problems = compare_blocks(got, want)
    assert not problems, f"{name} on {n} processes:\n" + "\n".join(problems[:40])
  for process, calls in enumerate(rewritten_calls(dump, "")):
    assert COLLECTIVE_TARGETS <= set(calls), (process, calls)


def check_pallas(n: int, tmp: str, **env) -> None:
  """A Pallas kernel in a shard_map across n processes, then a psum
  (tests/programs/pallas_program.py): each block equal to jax's CPU
  backend's (interpret mode) on n devices."""
  program = os.path.join(PROGRAMS, "pallas_program.py")
  ref = os.path.join(tmp, f"pallas-cpu-{n}.npz")
  on_cpu(n, program, ref)
  out = os.path.join(tmp, f"pallas-{n}.{{rank}}.npz")
  r = launch(n, program, out, **env)
  assert r.returncode == 0, r.output
  got = {rank: _load(out.format(rank=rank)) for rank in range(n)}
  problems = compare_blocks(got, _load(ref))
  assert not problems, f"pallas on {n} processes:\n" + "\n".join(problems[:40])


def check_training(n: int, tmp: str, **env) -> None:
  """A data-parallel training step (tests/programs/train_deep_mlp.py): the
  losses of jax's CPU backend on n devices, and as many all-reduce calls in
  the rewritten step as XLA's own compile has (its combiner: one); the
  combined gathers, scatters and sums of combined_collectives.py, one call
  per kind, equal to jax's CPU backend."""
  program = os.path.join(PROGRAMS, "train_deep_mlp.py")
  r = on_cpu(n, program, "--count")
  xla = int(re.search(r"all-reduces (\d+)", r.stdout).group(1))
  want = losses(r.stdout)
  assert len(want) == 10 and want[-1] < want[0], r.stdout
  dump = os.path.join(tmp, f"train-{n}")
  os.makedirs(dump, exist_ok=True)
  r = launch(n, program, MYPLUGIN_DUMP_REWRITTEN=dump, **env)
  assert r.returncode == 0, r.output
  for rank in range(n):
    np.testing.assert_allclose(losses(r.stdout, rank), want, rtol=TOLERANCE, err_msg=f"rank {rank}")
  assert [c.get("myplugin_all_reduce", 0) for c in rewritten_calls(dump, "jit_step")] == [xla] * n, r.output

  program = os.path.join(PROGRAMS, "combined_collectives.py")
  ref = os.path.join(tmp, f"combined-cpu-{n}.{{rank}}.npz")
  on_cpu(n, program, ref)
  dump = os.path.join(tmp, f"combined-{n}")
  os.makedirs(dump, exist_ok=True)
  out = os.path.join(tmp, f"combined-{n}.{{rank}}.npz")
  r = launch(n, program, out, MYPLUGIN_DUMP_REWRITTEN=dump, **env)
  assert r.returncode == 0, r.output
  for calls in rewritten_calls(dump, "jit_body"):
    assert {t: calls.get(t, 0) for t in ("myplugin_all_gather", "myplugin_reduce_scatter", "myplugin_all_reduce")} \
        == {"myplugin_all_gather": 1, "myplugin_reduce_scatter": 1, "myplugin_all_reduce": 1}, calls
  problems = compare_blocks({rank: _load(out.format(rank=rank)) for rank in range(n)}, _load(ref.format(rank=0)))
  assert not problems, "\n".join(problems[:40])


def check_pipeline(tmp: str, **env) -> None:
  """Two pipeline stages on two processes sharing the GPU
  (examples/pipeline_parallel.py): activations forward and gradients back
  with jax.device_put each step (cross-host transfers, staged through
  host memory from device memory), the losses of the same model in one
  process on jax's CPU backend."""
  program = os.path.join(EXAMPLES, "pipeline_parallel.py")
  want = losses(on_cpu(1, program).stdout)
  assert len(want) == 10 and want[-1] < want[0], want
  r = launch(2, program, **env)
  assert r.returncode == 0, r.output
  np.testing.assert_allclose(losses(r.stdout, 1), want, rtol=TOLERANCE, err_msg="rank 1 (the loss's stage)")


def check_moe(n: int, **env) -> None:
  """An expert-parallel MoE layer whose tokens travel by
  lax.ragged_all_to_all between the processes (tests/programs/moe_ragged.py,
  uneven routing: one expert gets none), against numpy. GPUs only: XLA's
  CPU engine has no ragged all-to-all."""
  r = launch(n, os.path.join(PROGRAMS, "moe_ragged.py"), **env)
  assert r.returncode == 0, r.output
  assert r.stdout.count("MOE OK") == n, r.output


def check_send_then_collective(**env) -> None:
  """Process 0 sends 48 MiB to process 1 (staged off the GPU) and goes
  straight on to a sum over both processes (a NCCL all-reduce on the GPU),
  which process 1 joins only once it holds the array
  (tests/programs/transfer_worker.py then_collective): the send must not
  wait for anything that sum holds. Both arrays equal numpy's."""
  from job import Job
  e = dict(JAX_PLATFORMS="myplugin", MYPLUGIN_COLLECTIVE_STALL_SECONDS="20",
           MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="60", **env)
  with Job(2, ["then_collective"], program="transfer_worker.py", env=e,
           per_rank_env=lambda rank: rank_env(rank, 2)) as job:
    codes = job.wait(timeout=180)
    assert codes == {0: 0, 1: 0}, job.all_output()
    for rank in range(2):
      got = job.event(rank, "then_collective")
      assert got["array_ok"] and got["sum_ok"], (rank, got, job.all_output())


# Faults, with the CPU tests' worker programs (tests/programs/straggler_worker.py,
# recovery_worker.py): short settings so that each ends in seconds.
FAULT_ENV = {"MYPLUGIN_HEARTBEAT_TIMEOUT": "10", "MYPLUGIN_STRAGGLER_SECONDS": "1"}


def check_sigkill(n: int, **env) -> None:
  """The last rank SIGKILLs itself inside a loop of psums (call #2): every
  other rank ends naming it, and the launcher exits with 100 + its rank."""
  victim = n - 1
  r = launch(n, os.path.join(PROGRAMS, "straggler_worker.py"), "sigkill",
             launcher_options=["--timeout", "120"], timeout=180, **dict(FAULT_ENV, **env))
  assert r.returncode == 100 + victim, f"exit {r.returncode}\n{r.output}"
  assert f"myplugin-run: rank {victim} failed first" in r.stderr, r.output
  for rank in range(victim):
    assert re.search(rf"^\[{rank}\] .*process {victim} failed", r.output, re.M), f"rank {rank}\n{r.output}"


def _agreement_beside(env: dict) -> bool:
  """Whether the job's NCCL calls agree beside the launch: on the CUDA
  engine (MYPLUGIN_ENGINE=cuda; test_gpu_kit.py runs these checks on the
  CPU engine, whose collectives always agree first), with
  MYPLUGIN_NCCL_AGREEMENT beside (the default) and fate-sharing on. A
  failed agreement then ends the process with the error printed, where
  agreeing before the launch raises it in Python first."""
  from jax_plugin import _myplugin
  setting = env.get("MYPLUGIN_NCCL_AGREEMENT", _myplugin.DEFAULTS["nccl_agreement"])
  return env.get("MYPLUGIN_ENGINE") == "cuda" and setting == "beside"


def check_sigstop(n: int, tmp: str, **env) -> None:
  """The last rank is stopped (SIGSTOP) before call #1 while the others
  wait in it: process 0 prints a straggler report naming it, then every
  other rank's call fails at the deadline naming it (raised in Python when
  the agreement runs before the launch; printed as the process ends when
  it runs beside it: call #1 was enqueued before its agreement)."""
  from job import Job
  from jax_plugin import _myplugin
  victim = n - 1
  e = dict(FAULT_ENV, JAX_PLATFORMS="myplugin", MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="5",
           MYPLUGIN_COLLECTIVE_STALL_SECONDS="5", MYPLUGIN_TRACE_DIR=tmp, **env)
  with Job(n, ["sleep", "120"], program="straggler_worker.py", env=e,
           per_rank_env=lambda rank: rank_env(rank, n)) as job:
    job.wait_event("waiting", ranks=range(victim), timeout=180)
    job.signal(victim, signal.SIGSTOP)
    if _agreement_beside(e):
      codes = job.wait(range(victim), timeout=60)
    else:
      job.wait_event("error", ranks=range(victim), timeout=60)
    out = job.all_output()
    assert f"myplugin: straggler report #" in job.output(0), out
    for rank in range(victim):
      if _agreement_beside(e):
        assert codes[rank] == _myplugin.FATE_SHARING_EXIT_CODE, (rank, out)
        assert f"waiting for processes [{victim}]" in job.output(rank), (rank, out)
        assert job.event(rank, "done") is None, (rank, out)
      else:
        error = job.event(rank, "error")["error"]
        assert f"waiting for processes [{victim}]" in error, (rank, out)


def check_mismatch(n: int, tmp: str, **env) -> None:
  """Process 1 issues an all-gather where the others issue a psum (call
  #2): an error on every rank that names the mismatch (raised in Python
  when the agreement runs before the launch; printed as every process ends
  when it runs beside it), and no rank goes past it."""
  from job import Job
  from jax_plugin import _myplugin
  e = dict(FAULT_ENV, JAX_PLATFORMS="myplugin", MYPLUGIN_TRACE_DIR=tmp, **env)
  with Job(n, ["mismatch"], program="straggler_worker.py", env=e,
           per_rank_env=lambda rank: rank_env(rank, n)) as job:
    codes = job.wait(timeout=180)
    out = job.all_output()
  assert all(code != 0 for code in codes.values()), out
  for rank in range(n):
    assert job.event(rank, "finished") is None, (rank, out)
    if _agreement_beside(e):
      assert codes[rank] == _myplugin.FATE_SHARING_EXIT_CODE and "collective mismatch" in job.output(rank), (rank, out)
    else:
      error = job.event(rank, "error")
      assert error is not None and "collective mismatch" in error["error"], (rank, out)


def check_recovery(n: int, **env) -> None:
  """In-place recovery (recovery_worker.py collective): a psum over every
  process; the last rank dies before the second; the survivors' psum fails
  naming it, they recover() (new communicators over the members) and psum
  again over the survivors."""
  from job import Job
  from jax_plugin import _myplugin
  victim = n - 1
  survivors = list(range(victim))
  service = _myplugin.CoordinationService.start("127.0.0.1", 0, n, "", 5.0, 60.0)
  try:
    e = dict(JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{service.port}",
             MYPLUGIN_COORDINATOR_STANDALONE="1", **env)
    with Job(n, ["collective", str(victim)], program="recovery_worker.py", env=e,
             per_rank_env=lambda rank: rank_env(rank, n)) as job:
      codes = job.wait(survivors, timeout=240)
      out = job.all_output()
  finally:
    service.stop()
  assert all(codes[r] == 0 for r in survivors), out
  for r in survivors:
    assert job.event(r, "first")["total"] == sum(range(1, n + 1)), out
    err = job.event(r, "collective_error")
    assert err is not None and job.event(r, "second_passed") is None, out
    assert f"process {victim} failed" in err["error"] and err["processes"] == [victim], err
    assert job.event(r, "verdict")["members"] == survivors, out
    third = job.event(r, "third")
    assert third is not None and third["total"] == sum(range(1, n)), out
    assert (third["process_count"], third["device_count"], third["process_index"]) == (n - 1, n - 1, r), third

"""NCCL between processes that share one GPU (issue 39): 2 and 4 processes
on GPU 0 through `myplugin-run --share-gpu` (or its per-rank variables,
jax_plugin.gpu_sharing.rank_environment, for jobs started one by one),
with MYPLUGIN_ENGINE=cuda. Every collective through shard_map, pmap and
jit, a data-parallel training step's combined calls, a pipeline whose
stages move arrays between the processes (cross-host transfers staged
through host memory), a send whose process goes straight on to a
collective that the receiver joins later, executables compiled
ahead of time on a machine with no GPU, and faults (a rank killed,
stopped, deviating; in-place recovery); a Triton Pallas kernel in a
shard_map across the processes; an MoE layer whose tokens travel by
lax.ragged_all_to_all (GPUs only). The programs and checks are in
shared_gpu.py; tests/test_gpu_kit.py runs them on the CPU engine.

MYPLUGIN_GPU_KIT_AOT names the folder of the executables compiled ahead of
time (the kit's aot/); without it that test is skipped, saying so."""
import os

import pytest

import shared_gpu

# tests/proc.py passes none of this process's MYPLUGIN_* variables on: the
# kit's partitioner engine and a NCCL library named by the caller go explicitly.
GPU = {"MYPLUGIN_ENGINE": "cuda", **{k: os.environ[k] for k in ("MYPLUGIN_SHADOW_ENGINE_PATH", "MYPLUGIN_NCCL_PATH")
                                     if os.environ.get(k)}}


@pytest.fixture(scope="module", params=shared_gpu.PROCESS_COUNTS)
def n(request):
  """The process count: a module-wide parameter, so that every test runs
  with 2 processes before any runs with 4 (what a cut-short run keeps)."""
  return request.param


def test_every_collective_through_shard_map_pmap_and_jit(tmp_path, n):
  shared_gpu.check_collectives(n, str(tmp_path), **GPU)


def test_training_step_and_combined_calls(tmp_path, n):
  shared_gpu.check_training(n, str(tmp_path), **GPU)


def test_executables_compiled_without_a_gpu(n):
  folder = os.environ.get("MYPLUGIN_GPU_KIT_AOT")
  if not folder:
    pytest.skip("MYPLUGIN_GPU_KIT_AOT names no folder of executables (ci/gpu_tests.sh --offline sets the kit's aot/)")
  program = os.path.join(shared_gpu.PROGRAMS, "gpu_aot_artifacts.py")
  r = shared_gpu.launch(n, program, "check", folder, **GPU)
  print(r.stdout)
  assert r.returncode == 0, r.output


def test_pipeline_stages_move_arrays_between_processes(tmp_path, n):
  if n != 2:
    pytest.skip("two stages: the example runs on 2 processes")
  shared_gpu.check_pipeline(str(tmp_path), **GPU)


def test_moe_tokens_travel_by_ragged_all_to_all(n):
  shared_gpu.check_moe(n, **GPU)


def test_a_send_then_a_collective_the_receiver_joins_later(n):
  if n != 2:
    pytest.skip("one sender, one receiver")
  shared_gpu.check_send_then_collective(**GPU)


def test_sigkill_of_one_rank_ends_the_others_naming_it(n):
  shared_gpu.check_sigkill(n, **GPU)


def test_sigstop_gives_the_straggler_report_then_the_deadline(tmp_path, n):
  shared_gpu.check_sigstop(n, str(tmp_path), **GPU)


def test_mismatched_collective_is_an_error_on_every_rank(tmp_path, n):
  shared_gpu.check_mismatch(n, str(tmp_path), **GPU)


def test_mismatch_raises_where_the_agreement_runs_before_the_launch(tmp_path, n):
  """The default path's test above, agreeing before the launch: the error
  raised in Python on every rank. Two processes only (the part's time)."""
  if n != 2:
    pytest.skip("the agreement before the launch runs with 2 processes (--part multiprocess's time)")
  shared_gpu.check_mismatch(n, str(tmp_path), **dict(GPU, MYPLUGIN_NCCL_AGREEMENT="before"))


def test_recovery_rebuilds_the_communicators(n):
  shared_gpu.check_recovery(n, **GPU)



def test_pallas_kernel_in_a_shard_map_across_processes(tmp_path, n):
  shared_gpu.check_pallas(n, str(tmp_path), **GPU)

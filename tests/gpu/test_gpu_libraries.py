"""Libraries, unchanged, on myplugin over XLA's CUDA engine on one GPU:
flax.nnx + optax training (losses against jax's own CUDA backend on the
same machine) and orbax-checkpoint (a state saved from the GPU, restored on
the GPU and on jax's CPU backend, checked against its known values). The
programs are those tests/test_libraries.py runs across processes on the
CPU engine; on one GPU their mesh has one device."""
import json
import os

from proc import child_env, run_python

PROGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "programs")


def run(platform, program, *args, **env):
  r = run_python([os.path.join(PROGRAMS, program), *args], child_env(JAX_PLATFORMS=platform, **env), timeout=300)
  assert r.returncode == 0, r.output
  return r.stdout


def losses(stdout):
  line = next(l for l in stdout.splitlines() if l.startswith("RESULT "))
  return json.loads(line.split("RESULT ", 1)[1])


def test_nnx_optax_losses_match_jax_cuda():
  ours = losses(run("myplugin", "nnx_train_worker.py", MYPLUGIN_ENGINE="cuda"))
  theirs = losses(run("cuda", "nnx_train_worker.py"))
  assert ours["platform"] == "myplugin" and theirs["platform"] == "gpu"
  assert ours["losses"][-1] < ours["losses"][0], ours
  # The same XLA release compiles both: the losses agree to float32 rounding.
  for a, b in zip(ours["losses"], theirs["losses"], strict=True):
    assert abs(a - b) <= 1e-5 * max(abs(b), 1e-3), (ours, theirs)


def test_orbax_checkpoint_saved_from_the_gpu_restores_on_gpu_and_cpu(tmp_path):
  directory = str(tmp_path / "ckpt")
  assert "DONE save myplugin" in run("myplugin", "orbax_worker.py", "save", directory, MYPLUGIN_ENGINE="cuda")
  assert "RESTORED process 0 of 1, devices 1, 4 shards equal" in run(
      "myplugin", "orbax_worker.py", "restore", directory, MYPLUGIN_ENGINE="cuda")
  assert "RESTORED process 0 of 1, devices 1, 4 shards equal" in run("cpu", "orbax_worker.py", "restore", directory)

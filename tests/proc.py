"""Running Python programs in child processes that can never hang a test:
each gets a hard deadline, its own process group, and the whole group is
killed on the way out, whatever happened."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile

# Variables of ours and jax's that a child must not inherit by accident.
_SCRUBBED = ("JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES", "XLA_FLAGS", "JAX_PJRT_CLIENT_CREATE_OPTIONS")


@dataclasses.dataclass
class Result:
  returncode: int
  stdout: str
  stderr: str

  @property
  def output(self) -> str:
    return self.stdout + self.stderr


def child_env(**overrides: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED and not k.startswith("MYPLUGIN_")}
  env.update(overrides)
  return env


def run_python(args: list[str], env: dict[str, str], timeout: float = 180) -> Result:
  """Runs `python ARGS`; raises AssertionError (after killing the group) on timeout.

  The child runs outside the source tree, so that it imports the installed
  jax_plugin (with its built libraries), not the checkout's.
  """
  return run([sys.executable, *args], env, timeout)


def run(argv: list[str], env: dict[str, str], timeout: float = 180, cwd: str | None = None) -> Result:
  """Runs a command in its own process group, which is killed on the way
  out; raises AssertionError on timeout. cwd defaults to outside the tree."""
  proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, cwd=cwd or tempfile.gettempdir())
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    kill_group(proc)
    out, err = proc.communicate(timeout=30)
    raise AssertionError(f"{' '.join(argv)} did not finish in {timeout} s\n{out}\n{err}")
  finally:
    kill_group(proc)
  return Result(proc.returncode, out, err)


def kill_group(proc: subprocess.Popen) -> None:
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass

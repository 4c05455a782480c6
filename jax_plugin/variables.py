"""The MYPLUGIN_* variables: which ones anything of ours reads, and a
warning, once per process, for one set in the environment that nothing
reads (a misspelt setting is otherwise silently ignored:
MYPLUGIN_NUM_DEVICE=8 gave one device and no word), naming the closest
known one."""
from __future__ import annotations

import difflib
import os
import sys

# Read by the Python package (C++ reads _myplugin.SETTING_VARIABLES), or
# set by myplugin-run for the processes it starts.
PYTHON_VARIABLES = frozenset({
    "MYPLUGIN_COMBINE_THRESHOLD_BYTES", "MYPLUGIN_COORDINATOR_ADDRESS", "MYPLUGIN_COORDINATOR_HOST",
    "MYPLUGIN_COORDINATOR_PORT", "MYPLUGIN_COORDINATOR_STANDALONE", "MYPLUGIN_COORDINATOR_TOKEN",
    "MYPLUGIN_DUMP_REWRITTEN", "MYPLUGIN_ENGINE", "MYPLUGIN_FORM_REDUCE_SCATTERS", "MYPLUGIN_ENGINE_KIND", "MYPLUGIN_ENGINE_PATH",
    "MYPLUGIN_GLOO_HOSTNAME", "MYPLUGIN_HEARTBEAT_TIMEOUT", "MYPLUGIN_INITIALIZATION_TIMEOUT",
    "MYPLUGIN_JAX_COORDINATOR_ADDRESS", "MYPLUGIN_LOCAL_DEVICE_IDS", "MYPLUGIN_NCCL_PATH",
    "MYPLUGIN_NETWORK_INTERFACE", "MYPLUGIN_NUM_DEVICES", "MYPLUGIN_NUM_PROCESSES", "MYPLUGIN_PROCESS_ID",
    "MYPLUGIN_REJOIN", "MYPLUGIN_RESTART_COUNT", "MYPLUGIN_SHADOW_ENGINE_PATH", "MYPLUGIN_SHUTDOWN_TIMEOUT",
    "MYPLUGIN_VISIBLE_DEVICES",
})
# Read by the build (CMake options) and the project's own tests and kits,
# never by the plugin: not a user's setting, not warned about either.
BUILD_AND_TEST_VARIABLES = frozenset({
    "MYPLUGIN_BUILD_TESTS", "MYPLUGIN_BUILD_BENCH", "MYPLUGIN_BUNDLE_ENGINE", "MYPLUGIN_FUZZ", "MYPLUGIN_SANITIZE",
    "MYPLUGIN_NCCL", "MYPLUGIN_HAVE_NCCL",
    "MYPLUGIN_NVIDIA_INCLUDE_DIRS", "MYPLUGIN_FAKE_CUDA_ENGINE", "MYPLUGIN_FAKE_NCCL_NEW", "MYPLUGIN_FAKE_NCCL_OLD",
    "MYPLUGIN_GPU_KIT_AOT", "MYPLUGIN_NCCL_LIBRARY", "MYPLUGIN_REQUIRE_GPU_COMPILE", "MYPLUGIN_TEST_REAL_ENGINE",
})

_warned = False


def known() -> frozenset[str]:
  from jax_plugin import _myplugin
  return PYTHON_VARIABLES | frozenset(_myplugin.SETTING_VARIABLES) | BUILD_AND_TEST_VARIABLES


def unknown(environ) -> list[tuple[str, str | None]]:
  """Each MYPLUGIN_* name in `environ` that nothing reads, with the closest
  known one (None when none is close)."""
  names = known()
  settings = sorted(names - BUILD_AND_TEST_VARIABLES)
  out = []
  for name in sorted(environ):
    if name.startswith("MYPLUGIN_") and name not in names:
      close = difflib.get_close_matches(name, settings, n=1, cutoff=0.75)
      out.append((name, close[0] if close else None))
  return out


def warn_unknown(environ=None) -> None:
  """Says, once per process, on stderr, which MYPLUGIN_* variables are
  ignored; in a job started by myplugin-run (or with our variables), only
  process 0 says it, not every rank the same."""
  global _warned
  environ = os.environ if environ is None else environ
  if _warned or environ.get("MYPLUGIN_PROCESS_ID", "0").strip() != "0":
    return
  _warned = True
  for name, close in unknown(environ):
    hint = f" (did you mean {close}?)" if close else " (docs/configuration.md lists every setting)"
    print(f"myplugin: {name} is not a myplugin setting and is ignored{hint}", file=sys.stderr, flush=True)

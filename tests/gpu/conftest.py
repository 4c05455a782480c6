"""GPU tests: marked gpu, and skipped, with the reason, where this machine
has no NVIDIA GPU, driver and CUDA engine. Everything runs in child
processes with MYPLUGIN_ENGINE=cuda (each with a hard deadline)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jax_plugin import engine_selection  # noqa: E402


def gpu_count() -> int:
  return engine_selection.probe_gpus()[0]


def pytest_collection_modifyitems(config, items):
  count, why = engine_selection.probe_gpus()
  cuda, _ = engine_selection.find_cuda_engine()
  here = os.path.dirname(os.path.abspath(__file__))
  for item in items:
    if not str(item.fspath).startswith(here):
      continue
    item.add_marker(pytest.mark.gpu)
    if count == 0:
      item.add_marker(pytest.mark.skip(reason=f"needs an NVIDIA GPU: {why}"))
    elif cuda is None:
      item.add_marker(pytest.mark.skip(reason="needs the CUDA engine: pip install '.[cuda13]' (or '.[cuda12]')"))

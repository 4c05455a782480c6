"""XLA's cost analysis of the engine's optimized modules.

The engine's C API answers UNIMPLEMENTED for cost analysis, so the PJRT
library hands us the optimized HloModuleProto and we run jaxlib's
HloCostAnalysis on it with a CPU client, the very analysis that jax's own
CPU backend reports for its executables.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_cpu_client = None


def _client():
  """jax's CPU backend when it exists, else a CPU client of our own (cheap:
  the analysis only reads the client's shape-size function)."""
  global _cpu_client
  from jax._src import xla_bridge
  backends = getattr(xla_bridge, "_backends", None) or {}
  if backends.get("cpu") is not None:
    return backends["cpu"]
  with _lock:
    if _cpu_client is None:
      from jax._src.lib import xla_client
      make = getattr(xla_client, "make_cpu_client", None)
      if make is None:
        raise NotImplementedError("this jaxlib cannot create a CPU client for XLA's cost analysis")
      _cpu_client = make()
    return _cpu_client


def analyze(hlo_module_proto: bytes) -> dict[str, float]:
  from jax._src import lib
  hlo = getattr(lib, "hlo", None)
  analysis = getattr(getattr(lib, "_jax", None), "hlo_module_cost_analysis", None)
  module_type = getattr(hlo, "HloModule", None)
  if analysis is None or module_type is None or not hasattr(module_type, "from_serialized_hlo_module_proto"):
    raise NotImplementedError("this jaxlib exposes no HLO cost analysis")
  module = module_type.from_serialized_hlo_module_proto(hlo_module_proto)
  return {str(k): float(v) for k, v in analysis(_client(), module).items()}

"""The two steps of a multi-process compile that need jaxlib's Python side.

The C++ compile (plugin/spmd/multiprocess_compiler.cc) calls them with the
GIL taken (jaxlib releases it while it compiles):

1. `shadow_options`: the caller's compile options plus the debug options
   that make the shadow engine dump the module right after SPMD
   partitioning.
2. `local_program`: that dump rewritten (see rewrite.py), parsed by jaxlib's
   HLO parser into an HloModuleProto, and compile options for this
   process's devices alone: one replica per local device, no partitions.
"""

from __future__ import annotations

import glob
import os

import numpy as np

from jax_plugin.spmd.hlo_text import UnsupportedProgram  # noqa: F401 (handed to C++ with the hooks)
from jax_plugin.spmd.rewrite import rewrite_module

_PASS = "spmd-partitioning"


def shadow_options(options: bytes, dump_dir: str) -> bytes:
  from jax._src.lib import xla_client as xc

  opts = xc.CompileOptions.ParseFromString(options)
  overrides = [(k, v) for k, v in opts.env_option_overrides
               if not k.startswith("xla_dump")]
  overrides += [("xla_dump_to", dump_dir), ("xla_dump_hlo_pass_re", _PASS), ("xla_dump_hlo_as_text", True),
                ("xla_dump_hlo_module_re", ".*")]
  # The shadow's machine code never runs: LLVM need not optimize it (a
  # quarter of the partition step's time). The HLO, shardings included, is
  # what it would be anyway.
  overrides += [("xla_backend_optimization_level", 0)]
  opts.env_option_overrides = overrides
  return opts.SerializeAsString()


def _partitioned_text(dump_dir: str) -> str:
  """The module after SPMD partitioning; a program of replicas only (pmap)
  is not partitioned, and its module before optimizations is the one."""
  after = sorted(glob.glob(os.path.join(dump_dir, f"*.after_{_PASS}*.txt")))
  if not after:
    after = sorted(glob.glob(os.path.join(dump_dir, "*.before_optimizations.txt")))
  if not after:
    raise RuntimeError(f"the shadow compile left no partitioned module in {dump_dir}: {sorted(os.listdir(dump_dir))}")
  with open(after[-1]) as f:
    return f.read()


def local_program(dump_dir: str, options: bytes, assignment: list[list[int]], num_devices: int,
                  local_engine_ids: dict[int, int]) -> tuple[bytes, bytes, list[int], bool]:
  """(HloModuleProto, compile options, local devices in execution order,
  whether the module is the same on every process).

  assignment: [replicas][partitions] global device ids of the program.
  local_engine_ids: this process's global device ids -> the engine's ids.
  """
  from jax._src.lib import hlo
  from jax._src.lib import xla_client as xc

  # jax numbers a program's devices replica-major (logical id r * P + p) and
  # hands this process's arguments over in that order.
  order = [int(d) for d in np.asarray(assignment).reshape(-1) if int(d) in local_engine_ids]
  from jax_plugin import _myplugin
  host = _myplugin.library_choice()["engine_kind"] != "cuda"
  # On the host engine our partition-id/replica-id handlers make the module
  # the same on every process, so one compilation-cache entry serves them all.
  text = rewrite_module(_partitioned_text(dump_dir), assignment, num_devices, order, fences=host,
                        runtime_device_ids=host)
  if not order:
    # Every device of the program belongs to other processes: nothing runs
    # here (the rewrite above still refuses, on every process alike, what
    # the others could not run).
    return b"", b"", [], host
  if os.environ.get("MYPLUGIN_DUMP_REWRITTEN"):
    with open(os.path.join(os.environ["MYPLUGIN_DUMP_REWRITTEN"], f"rewritten.{os.getpid()}.txt"), "a") as f:
      f.write(text)
  module = hlo.hlo_module_from_text(text)
  opts = xc.CompileOptions.ParseFromString(options)
  opts.num_replicas = len(order)
  opts.num_partitions = 1
  opts.device_assignment = xc.DeviceAssignment.create(
      np.array([[local_engine_ids[d]] for d in order], dtype=np.int64))
  build = opts.executable_build_options
  build.use_spmd_partitioning = False
  build.use_shardy_partitioner = False
  build.allow_spmd_sharding_propagation_to_output = [False]
  build.allow_spmd_sharding_propagation_to_parameters = [False]
  return module.as_serialized_hlo_module_proto(), opts.SerializeAsString(), order, host

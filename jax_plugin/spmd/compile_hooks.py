"""The two steps of a multi-process compile that need jaxlib's Python side.

The C++ compile (plugin/spmd/multiprocess_compiler.cc) calls them with the
GIL taken (jaxlib releases it while it compiles):

1. `shadow_program`: the caller's program with the stop mark in it (the
   shadow's compile ends after its HLO passes), and the caller's compile
   options plus the debug options that make the shadow engine dump the
   module right after SPMD partitioning.
2. `local_program`: that dump rewritten (see rewrite.py), parsed by jaxlib's
   HLO parser into an HloModuleProto, and compile options for this
   process's devices alone: one replica per local device, no partitions;
   and the partitioned whole program, which answers jax's questions about
   the executable.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import threading

import numpy as np

from jax_plugin.spmd.hlo_text import UnsupportedProgram  # noqa: F401 (handed to C++ with the hooks)
from jax_plugin.spmd.rewrite import rewrite_module

_PASS = "spmd-partitioning"


# The mark that ends the shadow's compile once its HLO passes are done (its
# machine code never runs, and emitting it was most of the partition's
# cost): a side-effecting custom call that no engine implements in this form.
# Its target is a host-callback name because Shardy keeps the sharding of a
# side-effecting call without results only for those (XLA's
# import_callback_custom_calls), and the partitioner refuses such a call
# without one; the untyped form of that name is registered nowhere, so the
# engine's back end refuses it before any code is generated. The partitioned
# module, dumped before that, is all we need. The name is the C++ side's
# (spmd/program_hooks.h), which tells that refusal from the program's own errors.
_STOP_ATTRIBUTE = "myplugin_shadow_stop"
_STOP_MESH = "myplugin_shadow_stop_mesh"
# Passes after partitioning whose work a stopped shadow throws away (checked:
# the partitioned module is the same with and without them). Not copy
# insertion: the stopped compile still runs buffer assignment, which without
# it gave two constants of a loop one buffer and aborted the process
# (threefry's rotation constants in a pmap of PRNG keys).
_PASSES_AFTER_PARTITIONING = (
    "fusion", "fusion-wrapper", "algsimp", "cse", "constant_folding", "reshape-mover",
    "layout-assignment", "gemv-rewriter", "dot-library-rewriter", "cpu-parallel-task-assigner",
    "shape-canonicalizer", "reshape-decomposer")


# Passes after partitioning that abort the process on what the partitioner
# writes, disabled in every shadow (the shadow's result is the module from
# before them, and its code never runs). The engine's all-reduce promotion
# clones a reduction body's root as a binary op; a partly manual
# shard_map's psum of bf16 has a copy there (its sharding constraint), and
# the clone is a CHECK failure: SIGABRT (jax's CPU backend aborts on the
# same program). carried_types.py sums bf16 in f32 in its place.
_ABORTING_PASSES = ("all-reduce-promotion",)


class _MarkContext:
  """One MLIR context for the stop marks, made again every `_USES` marks:
  making one registers every dialect jax uses, which took 5.8 of the mark's
  10 ms on a small program (a context per mark made the multi-process
  compile of small programs that much slower than jax's). Remade now and
  then because a context keeps every type and attribute it ever saw. One
  mark at a time: the compile threads may call the hook concurrently."""

  _USES = 64

  def __init__(self):
    self._lock = threading.Lock()
    self._context = None
    self._uses = 0

  @contextlib.contextmanager
  def __call__(self):
    from jax._src.interpreters import mlir
    with self._lock:
      if self._context is None or self._uses >= self._USES:
        self._context, self._uses = mlir.make_ir_context(), 0
      self._uses += 1
      with self._context:
        yield


_mark_context = _MarkContext()


def _with_stop_mark(code: bytes, shardy: bool) -> bytes | None:
  """The program (a StableHLO portable artifact) with the stop mark first in
  its main function; None when it cannot be placed."""
  from jax._src.lib import xla_client as xc
  from jax._src.lib.mlir import ir

  header = re.match(rb"ML\xefR.StableHLO_v(\d+\.\d+\.\d+)\x00", code, re.DOTALL)
  if header is None:
    return None
  with _mark_context():
    module = xc._xla.mlir.deserialize_portable_artifact(code)
    text = module.operation.get_asm(enable_debug_info=True)
    main = re.search(r"\n  func\.func public @main\(", text)
    if main is None:
      return None
    body = text.index("{\n", main.end()) + 1
    if shardy:
      sharding = f"sdy.sharding = #sdy.sharding_per_value<[<@{_STOP_MESH}, []>]>"
      mesh = f"\n  sdy.mesh @{_STOP_MESH} = <[], device_ids=[0]>"
    else:
      sharding = 'mhlo.sharding = "{maximal device=0}"'
      mesh = ""
    from jax_plugin import _myplugin
    mark = (f"\n    stablehlo.custom_call @{_myplugin.shadow_stop_target()}() {{has_side_effect = true, "
            f"mhlo.frontend_attributes = {{{_STOP_ATTRIBUTE} = \"\"}}, {sharding}}} : () -> ()")
    text = text[:main.start()] + mesh + text[main.start():body] + mark + text[body:]
    marked = ir.Module.parse(text)
    # Mixed, as jaxlib writes a program for a plugin: Shardy's dialect kept
    # as it is (else its shardings become frontend attributes, which newer
    # engines import only after a warning, with HloShardingV3 turned off).
    return xc._xla.mlir.serialize_portable_artifact(marked, header.group(1).decode(), use_mixed_serialization=True)


def shadow_program(code: bytes, fmt: str, options: bytes, dump_dir: str,
                   stop_early: bool) -> tuple[bytes, bytes, bool, bool]:
  """(program, compile options, whether the compile ends after the dump,
  whether it was partitioned here already: see _partition_on_jaxlib)."""
  from jax._src.lib import xla_client as xc

  marked = None
  if stop_early and fmt == "mlir":
    opts = xc.CompileOptions.ParseFromString(options)
    marked = _with_stop_mark(code, opts.executable_build_options.use_shardy_partitioner)
  program, shadow_opts = (marked or code), shadow_options(options, dump_dir, marked is not None)
  partitioned = _calls_jaxlib_rules(code)
  if partitioned:
    _partition_on_jaxlib(program, fmt, shadow_opts, dump_dir)
  return program, shadow_opts, marked is not None, partitioned


def _calls_jaxlib_rules(code: bytes) -> bool:
  from jax_plugin import _myplugin
  return any(name.encode() in code for name in _myplugin.jaxlib_partitioned_targets())


# jaxlib's own CPU clients that partition programs with custom partitioning
# rules, by device count: made on first need, kept for the process.
_jaxlib_clients: dict = {}


def _partition_on_jaxlib(program: bytes, fmt: str, options: bytes, dump_dir: str) -> None:
  """Partitions the program with jaxlib's own XLA, writing the same dump as
  the shadow engine would.

  jax registers the partitioning rules of custom_partitioning and
  inspect_array_sharding in jaxlib's XLA, and offers them to a C API plugin
  only through the PJRT custom-partitioner extension, which the CPU engine
  lacks. jaxlib's CPU client, with as many devices as the program, runs the
  same SPMD partitioner with those rules; the rules lower each op's
  per-shard body to plain HLO. Its machine code is never used: with the
  stop mark the compile ends after the HLO passes, and without one it is
  thrown away."""
  from jax._src.lib import xla_client as xc

  if fmt != "mlir":
    raise RuntimeError(f"a program with custom partitioning rules arrived as {fmt!r}, not StableHLO: myplugin "
                       "partitions such programs with jaxlib's XLA, which it hands StableHLO only")
  opts = xc.CompileOptions.ParseFromString(options)
  ids = _assigned_ids(opts)
  # A client whose device ids cover the program's (myplugin's global ids,
  # numbered from 0 as jaxlib's CPU devices are).
  count = max(ids) + 1
  client = _jaxlib_clients.get(count)
  if client is None:
    client = _jaxlib_clients[count] = xc.make_cpu_client(num_devices=count)
  by_id = {d.id: d for d in client.devices()}
  try:
    client.compile_and_load(program, xc.DeviceList(tuple(by_id[i] for i in ids)), opts)
  except Exception as e:  # the stop mark ends it on purpose; anything else shows as a missing dump
    failure = e
  else:
    failure = None
  # Such a call exists only in a partitioned program (jax lowers it inline
  # otherwise), so the partitioned module must be there: else the failure
  # (a rule that raised, say) is the user's answer.
  if not glob.glob(os.path.join(dump_dir, f"*.after_{_PASS}*.txt")):
    raise RuntimeError(f"partitioning the program with jaxlib's XLA (for its custom partitioning rules) failed: "
                       f"{failure}")
  open(os.path.join(dump_dir, _JAXLIB_PARTITIONED), "w").close()


def _assigned_ids(opts) -> list[int]:
  """The device ids of compile options' device assignment, replica-major
  (jaxlib binds no reader: DeviceAssignmentProto's field 3 holds one
  message per computation, each with its replicas' ids in field 1)."""
  if opts.device_assignment is None:
    return list(range(opts.num_replicas * opts.num_partitions))
  proto = opts.device_assignment.serialize()
  columns = []
  for number, _, start, end in _proto_fields(proto):
    if number != 3:
      continue
    ids = []
    for field, _, v, e in _proto_fields(proto[start:end]):
      if field == 1:
        ids += _packed_varints(proto[start:end][v:e]) if e > v else []
    columns.append(ids)
  return [column[r] for r in range(len(columns[0]) if columns else 0) for column in columns]


def _packed_varints(data: bytes) -> list[int]:
  out, value, shift = [], 0, 0
  for byte in data:
    value |= (byte & 0x7F) << shift
    shift += 7
    if not byte & 0x80:
      out.append(value)
      value = shift = 0
  return out


# Left in the dump directory by _partition_on_jaxlib: local_program then keeps
# the whole partitioned program even without a stop mark, since no shadow
# executable answers for it.
_JAXLIB_PARTITIONED = "myplugin-partitioned-by-jaxlib"


def shadow_options(options: bytes, dump_dir: str, stops_early: bool = False) -> bytes:
  from jax._src.lib import xla_client as xc

  opts = xc.CompileOptions.ParseFromString(options)
  overrides = [(k, v) for k, v in opts.env_option_overrides
               if not k.startswith("xla_dump")]
  # The text is what the rewrite reads and the engine then compiles: every
  # constant in full (by default a dump elides large ones as "{...}", which
  # parses back as other values: a wrong result).
  overrides += [("xla_dump_to", dump_dir), ("xla_dump_hlo_pass_re", _PASS), ("xla_dump_hlo_as_text", True),
                ("xla_dump_hlo_as_proto", True), ("xla_dump_hlo_module_re", ".*"), ("xla_dump_large_constants", True)]
  # The shadow's machine code never runs: LLVM need not optimize it (a
  # quarter of the partition step's time). The HLO, shardings included, is
  # what it would be anyway.
  overrides += [("xla_backend_optimization_level", 0)]
  disabled = [v for k, v in overrides if k == "xla_disable_hlo_passes"]
  overrides = [(k, v) for k, v in overrides if k != "xla_disable_hlo_passes"]
  disabled += _ABORTING_PASSES
  if stops_early:
    disabled += _PASSES_AFTER_PARTITIONING
  overrides += [("xla_disable_hlo_passes", ",".join(disabled))]
  opts.env_option_overrides = overrides
  return opts.SerializeAsString()


def _partitioned_dump(dump_dir: str) -> str:
  """The dump of the module after SPMD partitioning (without its extension);
  a program of replicas only (pmap) is not partitioned, and its module before
  optimizations is the one."""
  after = sorted(glob.glob(os.path.join(dump_dir, f"*.after_{_PASS}*.txt")))
  if after:
    return after[-1][:-len(".txt")]
  before = sorted(glob.glob(os.path.join(dump_dir, "*.before_optimizations.txt")))
  if not before:
    raise RuntimeError(f"the shadow compile left no partitioned module in {dump_dir}: {sorted(os.listdir(dump_dir))}")
  with open(before[-1]) as f:
    partitions = re.search(r"\bnum_partitions=([0-9]+)", f.readline())
  if partitions and int(partitions.group(1)) > 1:
    # The partitioner ran and did not finish: a stopped shadow that ended
    # in it, not at the mark. Its module before optimizations is the whole
    # program, never this process's part (the full compile says why).
    raise RuntimeError(f"the shadow compile ended before SPMD partitioning finished: no partitioned module of "
                       f"the {partitions.group(1)} partitions in {dump_dir}")
  return before[-1][:-len(".txt")]


# The stop mark's instruction (after partitioning, inside a conditional on
# the partition id that runs it on one device) becomes an empty tuple, and
# its attribute, which the partitioner copies onto what it made around it,
# goes.
_STOP_INSTRUCTION = re.compile(r"^(\s*(?:ROOT )?%[^\s=]+ = \(\) )custom-call\(\)[^\n]*" + _STOP_ATTRIBUTE + r"[^\n]*$",
                               re.MULTILINE)
_STOP_ATTRIBUTE_TEXT = re.compile(r', frontend_attributes=\{' + _STOP_ATTRIBUTE + r'=""\}|' + _STOP_ATTRIBUTE +
                                  r'="",|,' + _STOP_ATTRIBUTE + r'=""')


# A constant whose literal a dump left out.
_ELIDED_CONSTANT = re.compile(r"%[^\s=]+ = [^=\n]*? constant\(\{\.\.\.\}\)")


def _without_stop_mark(text: str) -> tuple[str, int]:
  text, marks = _STOP_INSTRUCTION.subn(r"\1tuple()", text)
  return _STOP_ATTRIBUTE_TEXT.sub("", text), marks


def _proto_fields(message: bytes):
  """The fields of a serialized protobuf message: (number, start, value
  start, end), where [start, end) is the whole encoded field and [value
  start, end) a length-delimited field's payload."""
  pos = 0

  def varint() -> int:
    nonlocal pos
    value = shift = 0
    while True:
      byte = message[pos]
      pos += 1
      value |= (byte & 0x7F) << shift
      shift += 7
      if not byte & 0x80:
        return value

  while pos < len(message):
    start = pos
    key = varint()
    wire = key & 7
    value_start = pos
    if wire == 0:
      varint()
    elif wire == 2:
      length = varint()  # (first: it moves pos)
      value_start = pos
      pos += length
    elif wire in (1, 5):
      pos += 8 if wire == 1 else 4
    else:
      raise ValueError(f"unexpected protobuf wire type {wire}")
    yield key >> 3, start, value_start, pos


# HloModuleProto's spmd_output_sharding and spmd_parameters_shardings: what
# the partitioner decided, which jax reads back as the executable's shardings.
_SPMD_SHARDING_FIELDS = (12, 14)


def _whole_program(dump: str, text: str) -> bytes:
  """The partitioned module (HloModuleProto) without the stop mark, with the
  partitioner's shardings; empty for a module the mark was not in."""
  from jax._src.lib import hlo
  if not os.path.exists(dump + ".hlo.pb"):
    return b""
  with open(dump + ".hlo.pb", "rb") as f:
    dumped = f.read()  # an HloProto: field 1 is the module
  module = next((dumped[v:e] for number, _, v, e in _proto_fields(dumped) if number == 1), b"")
  if not module:
    return b""
  shardings = b"".join(module[b:e] for number, b, _, e in _proto_fields(module) if number in _SPMD_SHARDING_FIELDS)
  return hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto() + shardings


def combine_threshold() -> int:
  """The bytes one combined collective call may carry
  (MYPLUGIN_COMBINE_THRESHOLD_BYTES, else C++'s default). Every process must
  use the same: they would issue different calls otherwise (a collective
  mismatch error, never wrong numbers)."""
  from jax_plugin import _myplugin
  value = os.environ.get("MYPLUGIN_COMBINE_THRESHOLD_BYTES", "").strip()
  if not value:
    return int(_myplugin.DEFAULTS["combine_threshold_bytes"])
  try:
    return max(int(value), 0)
  except ValueError:
    raise ValueError(f"MYPLUGIN_COMBINE_THRESHOLD_BYTES={value!r} is not a number of bytes") from None


def form_reduce_scatters() -> bool:
  """Whether the rewrite forms reduce-scatters (MYPLUGIN_FORM_REDUCE_SCATTERS
  1 or 0, else C++'s default). Every process must use the same, as for
  the threshold above."""
  from jax_plugin import _myplugin
  value = os.environ.get("MYPLUGIN_FORM_REDUCE_SCATTERS", "").strip()
  if not value:
    return bool(_myplugin.DEFAULTS["form_reduce_scatters"])
  if value not in ("0", "1"):
    raise ValueError(f"MYPLUGIN_FORM_REDUCE_SCATTERS={value!r} is neither 1 nor 0")
  return value == "1"


def local_program(dump_dir: str, options: bytes, assignment: list[list[int]], num_devices: int,
                  local_engine_ids: dict[int, int], engine_kind: str = "") -> tuple[bytes, bytes, list[int], bool, bytes]:
  """(HloModuleProto, compile options, local devices in execution order,
  whether the module is the same on every process, and the whole program
  after partitioning where the shadow stopped early (else empty)).

  assignment: [replicas][partitions] global device ids of the program.
  local_engine_ids: this process's global device ids -> the engine's ids.
  engine_kind: the engine the program is for ("cpu" or "cuda"); empty: this
  process's (a compile-only GPU target asks for "cuda" on a CPU machine).
  """
  from jax._src.lib import hlo
  from jax._src.lib import xla_client as xc

  # jax numbers a program's devices replica-major (logical id r * P + p) and
  # hands this process's arguments over in that order.
  order = [int(d) for d in np.asarray(assignment).reshape(-1) if int(d) in local_engine_ids]
  from jax_plugin import _myplugin
  host = (engine_kind or _myplugin.library_choice()["engine_kind"]) != "cuda"
  # Our partition-id/replica-id handlers make the module the same on every
  # process, so one compilation-cache entry serves them all, and on GPUs the
  # same schedule (the same order of collectives) comes out everywhere.
  dump = _partitioned_dump(dump_dir)
  with open(dump + ".txt") as f:
    partitioned, marks = _without_stop_mark(f.read())
  elided = _ELIDED_CONSTANT.search(partitioned)
  if elided:
    # Never compiled as it is: the parser would give the constant other values.
    raise RuntimeError(f"the partitioned module's dump elides a constant ({elided.group(0)[:200]}): the engine "
                       "ignored xla_dump_large_constants, and this program cannot be compiled across processes")
  text = rewrite_module(partitioned, assignment, num_devices, order, fences=host, runtime_device_ids=True,
                        combine_threshold=combine_threshold(), form_reduce_scatters=form_reduce_scatters(),
                        streams=not host, widen_narrow_sums=host, engine="cpu" if host else "cuda")
  if not order:
    # Every device of the program belongs to other processes: nothing runs
    # here (the rewrite above still refuses, on every process alike, what
    # the others could not run).
    return b"", b"", [], host, b""
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
  by_jaxlib = os.path.exists(os.path.join(dump_dir, _JAXLIB_PARTITIONED))
  whole = _whole_program(dump, partitioned) if marks or by_jaxlib else b""
  return module.as_serialized_hlo_module_proto(), opts.SerializeAsString(), order, host, whole

"""The rewrite: a partitioned (per-device) HLO module whose collectives,
partition-id and replica-id become calls of myplugin's FFI handlers.

The engine's own collectives only meet inside one process. After the
rewrite, every collective is a typed-FFI custom call whose attributes say
everything it needs (reduction, and the groups as global device ids), so the
same module, compiled for this process's devices alone, exchanges data with
the other processes through our communicators. Target names and attribute
keys come from collective_table.py, the C++ table that binds the handlers.

Which devices each group holds is collective_modes.py's; which collectives
share one call, and the order the computation is then written in, is
buckets.py's. The file stays one: a single pass over one module, computation
by computation, whose state (instruction names, shapes read so far, the
latest collective for ordering) every per-op rewrite below shares.
"""

from __future__ import annotations

import re

import numpy as np

from jax_plugin.spmd import buckets
from jax_plugin.spmd import carried_types
from jax_plugin.spmd import inline_calls
from jax_plugin.spmd import collective_table as table
from jax_plugin.spmd import reduce_scatter
from jax_plugin.spmd import scheduling_groups
from jax_plugin.spmd import replica_groups as rg
from jax_plugin.spmd.collective_modes import device_groups
from jax_plugin.spmd.hlo_text import (ArrayShape, HloTextError, Instruction, UnsupportedProgram, callees,
                                      computation_header, computations, lines_of, parse_instruction, parse_shape,
                                      split_top_level, to_int)

_REDUCTIONS = {"add": "sum", "multiply": "product", "maximum": "max", "minimum": "min", "and": "and", "or": "or"}

# Collectives the rewrite does not handle. Left in place, the engine would run
# them among this process's devices only: wrong numbers, so refuse instead.
_REFUSED = {
    "all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done", "collective-permute-start",
    "collective-permute-done", "collective-broadcast", "send", "send-done", "recv",
    "recv-done", "reduce-scatter-start", "async-start",
}


# ASCII digits only: str.isdigit() also takes digits that int() does not read.
_DIGITS = re.compile(r"[0-9]+")

_COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                "ragged-all-to-all"}

# The explicit stream our collective calls run on, on GPUs (`streams`): the
# thunks of an async pair annotated with it, our handlers' included, get
# that stream as their FFI PlatformStream (Rewriter.on_stream), so NCCL runs
# beside the compute stream's kernels, as
# `jax.experimental.compute_on("gpu_stream:1")` does for a region. One
# stream for all: NCCL needs every rank's calls in one order.
_COLLECTIVE_STREAM = 1

# The collectives whose handlers take several operands (one call per bucket).
_COMBINABLE = {"all-reduce": table.ALL_REDUCE, "all-gather": table.ALL_GATHER,
               "reduce-scatter": table.REDUCE_SCATTER}
_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                  "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}


def _function_name(lines: list[str]) -> str:
  """The module's name (jax names it for the jitted function: jit_train_step,
  pmap_step), which every collective carries as its `function` attribute for
  the flight recorder; characters outside [A-Za-z0-9_.-] become '_', so the
  name is always a plain string attribute."""
  header = next((l for l in lines if l.startswith("HloModule")), "")
  name = header[len("HloModule"):].strip().split(",")[0].strip()
  return "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in name)


def _dimension(inst: Instruction, text: str) -> int:
  """The one dimension a collective works along (`dimensions={1}`)."""
  digits = text.strip().removeprefix("{").removesuffix("}").strip()
  if not _DIGITS.fullmatch(digits):
    raise UnsupportedProgram(f"{inst.opcode} {inst.name}: dimensions={text} is not one dimension")
  return to_int(digits)


def _array_result(inst: Instruction) -> ArrayShape:
  shape = inst.shape
  if not isinstance(shape, ArrayShape):
    raise UnsupportedProgram(f"{inst.opcode} {inst.name} has a result of {inst.shape_text}, not an array")
  return shape


def _dense(values) -> str:
  values = [int(v) for v in values]
  return f"dense<[{', '.join(str(v) for v in values)}]> : tensor<{len(values)}xi64>"


class _Rewriter:

  def __init__(self, lines: list[str], assignment: np.ndarray, num_devices: int, local_order: list[int],
               fences: bool, runtime_device_ids: bool, combine_threshold: int, form_reduce_scatters: bool,
               streams: bool, widen_narrow_sums: bool, engine: str):
    self.runtime_device_ids = runtime_device_ids
    self.engine = engine
    self.streams = streams
    self.widen_narrow_sums = widen_narrow_sums
    # Computations that wrap a collective call on its stream, written before
    # the computation being rewritten (the parser wants callees first).
    self.wrappers: list[str] = []
    self.form_reduce_scatters = form_reduce_scatters
    self.combine_threshold = combine_threshold
    self.assignment = assignment  # [replicas, partitions] -> global device id
    self.num_devices = num_devices
    self.local_order = local_order  # the local program's replica r is global device local_order[r]
    self.fences = fences
    self.lines = lines
    self.function = _function_name(lines)
    self.computations = computations(lines)
    self.counter = 0
    self.names = {inst.name for inst in map(parse_instruction, lines) if inst is not None}
    self.communicates = {name: self._communicates(name, set()) for name in self.computations}
    # Computations that a `call` XLA inlines runs (a shard_map body) and
    # that inline_calls left (called from several places, or not plainly):
    # the call inliner clones their instructions into the caller, an async
    # pair of ours too, but not the computation its start calls, which the
    # original (dead, on another thread, so never removed) still calls, and
    # copy insertion refuses the call graph. Their collectives stay a `call`
    # annotated with the stream, which XLA makes a pair of after inlining
    # (Rewriter.on_stream).
    self.inlined: set[str] = set()
    for inst in map(parse_instruction, lines):
      if inst is not None and inst.opcode == "call" and 'inlineable="false"' not in (
          inst.attr("frontend_attributes") or ""):
        self.inlined.update(callees(inst))
    self.current: str | None = None  # the computation being rewritten
    # The current computation's all-reduce pairs (start, done), grouped with
    # a matmul each once it is written (scheduling_groups.py), and the next
    # group id of the module.
    self.pairs: list[tuple[str, str]] = []
    self.next_group = 1
    self.last: str | None = None  # the latest collective of the current computation
    self.shapes: dict[str, ArrayShape | list[ArrayShape]] = {}  # of the instructions read so far

  def _communicates(self, name: str, seen: set[str]) -> bool:
    comp = self.computations.get(name)
    if comp is None or name in seen:
      return False
    seen.add(name)
    return bool(comp.opcodes & _COLLECTIVES) or any(self._communicates(c, seen) for c in comp.callees)

  # -- emitting -----------------------------------------------------------

  def fresh(self, base: str) -> str:
    """A new instruction name. Never one the module has, and never with the
    `#index` of a tuple element operand (not part of a name)."""
    while True:
      self.counter += 1
      name = f"{base.split('#')[0]}.myplugin.{self.counter}"
      if name not in self.names:
        return name

  def custom_call(self, indent, name, shape: ArrayShape, dims, operand, operand_shape: ArrayShape, target,
                  config: dict[str, str], root=False) -> str:
    """A collective call. Without streams it also reads the previous
    collective's result, which orders it after that one: XLA's CPU runtime
    runs thunks that share no buffer concurrently, and collectives must run
    in one order everywhere (call_line)."""
    self.shapes[name] = ArrayShape(shape.dtype, shape.dims if dims is None else tuple(dims))
    if not operand:
      return self.call_line(indent, name, shape.text(dims), [], [], target, config, root)
    return self.call_line(indent, name, shape.text(dims), [operand], [operand_shape], target, config, root)

  def call_line(self, indent, name, result: str, operands: list[str], shapes: list[ArrayShape], target,
                config: dict[str, str], root=False, ordered_by: str | None = None, in_place: bool = False) -> str:
    """The custom call of `target` on `operands`, after the latest collective
    (`ordered_by`, the array that stands for it, becomes the latest). With
    streams, no such chain: the calls run in the schedule's order on their
    one stream, and the schedule is the same on every process (the module
    is, with runtime device ids); a chain would hold each call's start
    until the one before it is done, and the compute beside it with it.
    `in_place`: the result is the first operand's buffer (the engine copies
    the operand first where it is still needed elsewhere)."""
    arrays = list(shapes)  # the operands' (no chain with streams, where on_stream takes them)
    operands, shapes = list(operands), [s.text() for s in shapes]
    if self.last is not None and operands and not self.streams:
      operands.append(self.last)
      shapes.append(self.shapes[self.last].text())
    if operands:
      self.last = ordered_by or name
    layouts = f", operand_layout_constraints={{{', '.join(shapes)}}}" if operands else ""
    cfg = ", ".join(f"{k} = {v}" for k, v in sorted({**config, table.FUNCTION.key: f'"{self.function}"'}.items()))
    aliasing = ", output_to_operand_aliasing={{}: (0, {})}" if in_place else ""
    def call(args: list[str]) -> str:
      return (f"custom-call({', '.join(args)}), custom_call_target=\"{target}\"{layouts}{aliasing}, "
              f"api_version=API_VERSION_TYPED_FFI, backend_config={{{cfg}}}")
    if not (self.streams and operands):
      return f"{indent}{'ROOT ' if root else ''}{name} = {result} {call(operands)}"
    if self.current in self.inlined:
      return self.annotated_call(indent, name, result, operands, shapes, call, root)
    return self.on_stream(indent, name, result, operands, arrays, call, root,
                          grouped=target == table.ALL_REDUCE.name)

  def annotated_call(self, indent, name, result: str, operands: list[str], shapes: list[str], call, root) -> str:
    """The call alone in a computation that a `call` annotated with the
    collective stream runs: XLA makes it an async pair (call-start/call-done)
    on that stream once it has inlined the computation this one is in. On
    jax 0.11's engine such a pair is on the main execution thread, which its
    scheduler does not take as asynchronous (see on_stream)."""
    wrapper = self.fresh("%on_stream")
    params = [self.fresh("%operand") for _ in operands]
    lines = [f"{wrapper} ({', '.join(f'{p[1:]}: {t}' for p, t in zip(params, shapes))}) -> {result} {{"]
    lines += [f"  {p} = {t} parameter({i})" for i, (p, t) in enumerate(zip(params, shapes))]
    lines += [f"  ROOT {self.fresh(name)} = {result} {call(params)}", "}", ""]
    self.wrappers.append("\n".join(lines))
    return (f"{indent}{'ROOT ' if root else ''}{name} = {result} call({', '.join(operands)}), to_apply={wrapper}, "
            f"frontend_attributes={{_xla_stream_annotation=\"{_COLLECTIVE_STREAM}\",inlineable=\"false\"}}")

  def on_stream(self, indent, name, result: str, operands: list[str], ins: list[ArrayShape], call, root,
                grouped: bool = False) -> str:
    """The call as an async pair of our own (async-start/async-done) on the
    "parallel" execution thread, annotated with the collective stream: the
    thunk emitter runs the computation it starts on that stream, and both
    engines' latency-hiding schedulers take the pair as asynchronous work
    (a `call` annotated with the stream, which XLA makes a pair of itself,
    lands on the main thread in jax 0.11's engine, where its scheduler
    skips the computation and orders the pair back to back). Every array
    the pair passes is flattened to rank 1, bitcast back around the custom
    call inside: a rank-1 array has one layout, so the main thread's layout
    assignment cannot give the pair another than the computation it runs
    has (XLA's verifier refuses that)."""
    res = parse_shape(result)
    results = res if isinstance(res, list) else [res]

    def flat(a: ArrayShape) -> ArrayShape:
      return ArrayShape(a.dtype, (int(np.prod(a.dims, dtype=np.int64)),) if a.dims else ())

    flat_results = [flat(r) for r in results]
    flat_result = (f"({', '.join(r.text() for r in flat_results)})" if isinstance(res, list)
                   else flat_results[0].text())

    def signature(params: list[str]) -> str:
      return f"({', '.join(f'{p[1:]}: {flat(a).text()}' for p, a in zip(params, ins))}) -> {flat_result}"

    # The custom call between bitcasts, in a computation of its own.
    inner = self.fresh("%on_stream")
    params = [self.fresh("%operand") for _ in ins]
    body = [f"{inner} {signature(params)} {{"]
    body += [f"  {p} = {flat(a).text()} parameter({i})" for i, (p, a) in enumerate(zip(params, ins))]
    shaped = []
    for p, a in zip(params, ins):
      shaped.append(self.fresh("%shaped"))
      body.append(f"  {shaped[-1]} = {a.text()} bitcast({p})")
    called = self.fresh(name)
    body.append(f"  {called} = {result} {call(shaped)}")
    body += self.reshaped("  ", "ROOT " + self.fresh("%flat"), flat_result, called, results, flat_results,
                          isinstance(res, list), "bitcast", "%flat")
    body += ["}", ""]
    # The computation the pair starts: a call of it (XLA's thunk emitter
    # runs the started computation's thunks on the annotated stream).
    started = self.fresh("%started")
    params = [self.fresh("%operand") for _ in ins]
    body += [f"{started} {signature(params)} {{"]
    body += [f"  {p} = {flat(a).text()} parameter({i})" for i, (p, a) in enumerate(zip(params, ins))]
    body += [f"  ROOT {self.fresh('%called')} = {flat_result} call({', '.join(params)}), to_apply={inner}", "}", ""]
    self.wrappers.append("\n".join(body))
    lines, flat_operands = [], []
    for o, a in zip(operands, ins):
      flat_operands.append(self.fresh(o))
      lines.append(f"{indent}{flat_operands[-1]} = {flat(a).text()} reshape({o})")
    attributes = f"frontend_attributes={{_xla_stream_annotation=\"{_COLLECTIVE_STREAM}\"}}"
    start, done = self.fresh(name + "-start"), self.fresh(name + "-done")
    lines.append(f"{indent}{start} = (({', '.join(flat(a).text() for a in ins)}), {flat_result}) "
                 f"async-start({', '.join(flat_operands)}), async_execution_thread=\"parallel\", calls={started}, "
                 f"{attributes}")
    lines.append(f"{indent}{done} = {flat_result} async-done({start}), {attributes}")
    if grouped:
      self.pairs.append((start, done))
    lines += self.reshaped(indent, ("ROOT " if root else "") + name, result, done, flat_results, results,
                           isinstance(res, list), "reshape", name)
    return "\n".join(lines)

  def reshaped(self, indent, target: str, target_shape: str, source: str, from_shapes: list[ArrayShape],
               to_shapes: list[ArrayShape], is_tuple: bool, opcode: str, base: str) -> list[str]:
    """`target` (its name, ROOT where it is the root) = `source` given each
    of `to_shapes` by `opcode` (reshape or bitcast): element by element
    (a tuple of them) where `source` is a tuple of `from_shapes`."""
    if not is_tuple:
      return [f"{indent}{target} = {target_shape} {opcode}({source})"]
    lines, parts = [], []
    for i, (f, t) in enumerate(zip(from_shapes, to_shapes)):
      element, shaped = self.fresh(base), self.fresh(base)
      lines += [f"{indent}{element} = {f.text()} get-tuple-element({source}), index={i}",
                f"{indent}{shaped} = {t.text()} {opcode}({element})"]
      parts.append(shaped)
    return lines + [f"{indent}{target} = {target_shape} tuple({', '.join(parts)})"]

  def transpose(self, indent, name, operand, shape: ArrayShape, src_dims, perm, root=False) -> str:
    dims = tuple(src_dims[p] for p in perm)
    return (f"{indent}{'ROOT ' if root else ''}{name} = {shape.text(dims)} transpose({operand}), "
            f"dimensions={{{','.join(str(p) for p in perm)}}}")

  def along_dim(self, inst, operand, operand_shape: ArrayShape, result_shape: ArrayShape, dim: int, target,
                config, name, root) -> list[str]:
    """A handler that works on axis 0, applied along `dim`: transpose there and back."""
    if not isinstance(result_shape, ArrayShape) or len(result_shape.dims) != len(operand_shape.dims) or \
        not 0 <= dim < max(len(operand_shape.dims), 1):
      raise UnsupportedProgram(f"{inst.opcode} {inst.name} along dimension {dim} of {operand_shape.text()} "
                               f"with a result of {inst.shape_text}: not a collective myplugin can rewrite")
    if dim == 0 or len(operand_shape.dims) <= 1:
      return [self.custom_call(inst.indent, name, result_shape, None, operand, operand_shape, target, config, root)]
    rank = len(operand_shape.dims)
    perm = [dim] + [i for i in range(rank) if i != dim]
    inverse = [int(i) for i in np.argsort(perm)]
    moved = self.fresh(inst.name)
    called = self.fresh(inst.name)
    moved_dims = tuple(operand_shape.dims[p] for p in perm)
    moved_shape = ArrayShape(operand_shape.dtype, moved_dims)
    result_moved = tuple(result_shape.dims[p] for p in perm)
    return [
        self.transpose(inst.indent, moved, operand, operand_shape, operand_shape.dims, perm),
        self.custom_call(inst.indent, called, result_shape, result_moved, moved, moved_shape, target, config),
        self.transpose(inst.indent, name, called, result_shape, result_moved, inverse, root),
    ]

  def per_operand(self, inst: Instruction, emit) -> list[str]:
    """Variadic collectives: one call per operand, then a tuple of the results."""
    shape = inst.shape
    results = len(shape) if isinstance(shape, list) else 1
    if len(inst.operands) != results or any(not isinstance(r, ArrayShape) for r in (
        shape if isinstance(shape, list) else [shape])):
      raise UnsupportedProgram(f"{inst.opcode} {inst.name} has {len(inst.operands)} operands and a result of "
                               f"{inst.shape_text}: myplugin rewrites one array result per operand")
    if not isinstance(shape, list):
      return emit(inst.operands[0], self.operand_shape(inst, 0), shape, inst.name, inst.root)
    lines, names = [], []
    for i, (operand, result) in enumerate(zip(inst.operands, shape)):
      name = self.fresh(inst.name)
      names.append(name)
      lines += emit(operand, self.operand_shape(inst, i), result, name, False)
    lines.append(f"{inst.indent}{'ROOT ' if inst.root else ''}{inst.name} = {inst.shape_text} "
                 f"tuple({', '.join(names)})")
    return lines

  def shape_of(self, name: str) -> ArrayShape | list[ArrayShape] | None:
    """The shape of an operand. Newer XLA prints an element of a tuple-shaped
    value as `%value#index` (nested: `%value#1#0`) instead of a separate
    get-tuple-element instruction."""
    base, *indices = name.split("#")
    shape = self.shapes.get(base)
    for index in indices:
      if not isinstance(shape, list) or not _DIGITS.fullmatch(index) or to_int(index) >= len(shape):
        return None
      shape = shape[to_int(index)]
    return shape

  def operand_shape(self, inst: Instruction, i: int) -> ArrayShape:
    shape = self.shape_of(inst.operands[i])
    if not isinstance(shape, ArrayShape):
      raise UnsupportedProgram(f"{inst.opcode} {inst.name} has an operand that is not an array")
    return shape

  # -- per opcode ---------------------------------------------------------

  def reducer_of(self, inst: Instruction) -> str | None:
    comp = self.computations.get(inst.attr("to_apply") or "")
    return comp.reducer if comp else None

  def reduction(self, inst: Instruction) -> str:
    comp = self.computations.get(inst.attr("to_apply") or "")
    kind = _REDUCTIONS.get((comp.reducer or "") if comp else "")
    if kind is None:
      raise UnsupportedProgram(
          f"{inst.opcode} {inst.name} reduces with a computation that is not one element-wise op on its two "
          f"operands (its root: {comp.root_opcode if comp else '?'}); myplugin's collectives reduce across "
          f"processes with {', '.join(sorted(_REDUCTIONS))}, as lax.psum, pmax, pmin and their kin lower to. "
          f"Reduce with one of those, or run this step in one process")
    return kind

  def grouped_config(self, inst: Instruction) -> dict[str, str]:
    groups = device_groups(inst, self.assignment)
    return {table.REPLICA_GROUPS.key: _dense([d for g in groups for d in g]),
            table.GROUP_SIZE.key: f"{len(groups[0])} : i64"}

  def collective_config(self, inst: Instruction) -> dict[str, str]:
    """The attributes of an all-reduce, all-gather or reduce-scatter call."""
    config = self.grouped_config(inst)
    if inst.opcode != "all-gather":
      config[table.REDUCTION.key] = f'"{self.reduction(inst)}"'
    return config

  # -- buckets (buckets.py) ---------------------------------------------

  def parts(self, inst: Instruction) -> list[tuple[str, ArrayShape, ArrayShape, int]] | None:
    """(operand, its shape, result shape, dimension) of each operand of a
    collective that may share a call; None for one that may not (the
    rewrite of it alone then says why, if it cannot be rewritten at all)."""
    if inst.opcode not in _COMBINABLE:
      return None
    try:
      shape = inst.shape
      results = shape if isinstance(shape, list) else [shape]
      dim = 0 if inst.opcode == "all-reduce" else _dimension(inst, inst.attr("dimensions") or "{0}")
      if len(inst.operands) != len(results) or not results:
        return None
      out = []
      for i, (operand, result) in enumerate(zip(inst.operands, results)):
        xs = self.operand_shape(inst, i)
        if not isinstance(result, ArrayShape) or len(result.dims) != len(xs.dims) or \
            not 0 <= dim < max(len(xs.dims), 1) or xs.dtype not in _ELEMENT_BYTES or result.dtype != xs.dtype:
          return None
        out.append((operand, xs, result, dim))
      return out
    except HloTextError:
      return None

  def combinable(self, inst: Instruction):
    """(bucket key, bytes) of a collective that may share a call: one kind,
    reduction and device groups per bucket (the dimension of a gather or
    scatter need not agree: each operand is moved to axis 0 for the call)."""
    parts = self.parts(inst)
    # The root stays the computation's last line; a control edge stays on a call of its own.
    if parts is None or inst.root or inst.attr("control-predecessors") is not None:
      return None
    try:
      config = self.collective_config(inst)
    except HloTextError:
      return None
    nbytes = sum(_ELEMENT_BYTES[xs.dtype] * max(int(np.prod(xs.dims)), int(np.prod(ys.dims)))
                 for _, xs, ys, _ in parts)
    return (inst.opcode, tuple(sorted(config.items()))), nbytes

  def closes(self, inst: Instruction) -> bool:
    return inst.opcode in ("while", "conditional", "call") and any(self.communicates.get(c) for c in callees(inst))

  def closes_bucket(self, inst: Instruction) -> bool:
    """Whether `inst` ends every open bucket: a loop, branch or call that
    communicates; with streams also a matmul or convolution. A bucket is
    one call that starts when its last member is ready, so on GPUs, where
    the call runs beside the compute, a gradient computed early would wait
    for the matmuls that make the later members (a bias's gradient joining
    the first layer's weights') instead of running beside them."""
    return self.closes(inst) or (self.streams and inst.opcode in ("dot", "convolution"))

  def combined(self, members: list[Instruction]) -> list[str]:
    """One call for a bucket's collectives: their operands (each moved to
    axis 0 where it works along another), a tuple of their results, and
    each member's value taken back out of it."""
    first = members[0]
    indent = first.indent
    target, config = _COMBINABLE[first.opcode].name, self.collective_config(first)
    lines, operands, operand_shapes, results, back = [], [], [], [], []
    for inst in members:
      for operand, xs, ys, dim in self.parts(inst):
        if dim == 0 or len(xs.dims) <= 1:
          operands.append(operand)
          operand_shapes.append(xs)
          results.append(ys)
          back.append(None)
          continue
        perm = [dim] + [i for i in range(len(xs.dims)) if i != dim]
        moved = self.fresh(inst.name)
        moved_shape = ArrayShape(xs.dtype, tuple(xs.dims[p] for p in perm))
        lines.append(self.transpose(indent, moved, operand, xs, xs.dims, perm))
        self.shapes[moved] = moved_shape
        operands.append(moved)
        operand_shapes.append(moved_shape)
        results.append(ArrayShape(ys.dtype, tuple(ys.dims[p] for p in perm)))
        back.append((ys, [int(i) for i in np.argsort(perm)]))
    # A member of one result, used as it comes back, keeps its name for it.
    call = self.fresh(first.name)
    elements, k = [], 0
    for inst in members:
      alone = not isinstance(inst.shape, list)
      for _ in inst.operands:
        elements.append(inst.name if alone and back[k] is None else self.fresh(inst.name))
        k += 1
    lines.append(self.call_line(indent, call, f"({', '.join(r.text() for r in results)})", operands, operand_shapes,
                                target, config, ordered_by=elements[0]))
    for element, result in zip(elements, results):
      self.shapes[element] = result
    k = 0
    for inst in members:
      alone = not isinstance(inst.shape, list)
      names = []
      for _ in inst.operands:
        element, result = elements[k], results[k]
        lines.append(f"{indent}{element} = {result.text()} get-tuple-element({call}), index={k}")
        if back[k] is not None:
          ys, inverse = back[k]
          element = inst.name if alone else self.fresh(inst.name)
          lines.append(self.transpose(indent, element, elements[k], ys, result.dims, inverse))
        names.append(element)
        k += 1
      if not alone:
        lines.append(f"{indent}{inst.name} = {inst.shape_text} tuple({', '.join(names)})")
    return lines

  def rewrite(self, inst: Instruction) -> list[str] | None:
    op = inst.opcode
    if op == "all-reduce":
      config = self.collective_config(inst)
      return self.per_operand(inst, lambda x, xs, ys, name, root: [
          self.custom_call(inst.indent, name, ys, None, x, xs, table.ALL_REDUCE.name, config, root)])
    if op in ("all-gather", "reduce-scatter"):
      config = self.collective_config(inst)
      dim = _dimension(inst, inst.attr("dimensions") or "{0}")
      return self.per_operand(inst, lambda x, xs, ys, name, root: self.along_dim(
          inst, x, xs, ys, dim, _COMBINABLE[op].name, config, name, root))
    if op == "all-to-all":
      dims = inst.attr("dimensions")
      if dims is None or len(inst.operands) != 1:
        raise UnsupportedProgram(f"all-to-all {inst.name} is the tuple form, which myplugin does not rewrite")
      config = self.grouped_config(inst)
      dim = _dimension(inst, dims)
      shape = _array_result(inst)
      return self.along_dim(inst, inst.operands[0], self.operand_shape(inst, 0), shape, dim,
                            table.ALL_TO_ALL.name, config, inst.name, inst.root)
    if op == "collective-permute":
      return [self.collective_permute(inst)]
    if op == "ragged-all-to-all":
      return self.ragged_all_to_all(inst)
    if op in ("partition-id", "replica-id"):
      return self.device_id(inst)
    if op in _REFUSED or (op.startswith("all-") and op not in ("all-reduce", "all-gather", "all-to-all")):
      raise UnsupportedProgram(f"the program uses {op} ({inst.name}), which myplugin cannot run across processes")
    return None

  def device_id(self, inst: Instruction) -> list[str]:
    """partition-id / replica-id of the global program: a table lookup by the
    local program's own replica id (its replica r runs local_order[r]), or,
    with runtime_device_ids, our handler's lookup by the device's global id,
    which keeps the module the same on every process."""
    axis = 1 if inst.opcode == "partition-id" else 0
    if inst.operands or inst.shape_text.split("{")[0] != "u32[]":
      raise UnsupportedProgram(f"{inst.opcode} {inst.name} = {inst.shape_text} with {len(inst.operands)} operands: "
                               f"XLA's {inst.opcode} is u32[] of none")
    where = {int(d): index[axis] for index, d in np.ndenumerate(self.assignment)}
    if self.runtime_device_ids:
      ids = [where.get(d, -1) for d in range(self.num_devices)]
      target = table.PARTITION_ID if inst.opcode == "partition-id" else table.REPLICA_ID
      return [f"{inst.indent}{'ROOT ' if inst.root else ''}{inst.name} = {inst.shape_text} custom-call(), "
              f"custom_call_target=\"{target.name}\", "
              f"api_version=API_VERSION_TYPED_FFI, backend_config={{{table.IDS.key} = {_dense(ids)}}}"]
    local_ids = [where[d] for d in self.local_order]
    rid, values, sliced = self.fresh(inst.name), self.fresh(inst.name), self.fresh(inst.name)
    n = len(local_ids)
    return [
        f"{inst.indent}{rid} = u32[] replica-id()",
        f"{inst.indent}{values} = u32[{n}]{{0}} constant({{{', '.join(str(v) for v in local_ids)}}})",
        f"{inst.indent}{sliced} = u32[1]{{0}} dynamic-slice({values}, {rid}), dynamic_slice_sizes={{1}}",
        f"{inst.indent}{'ROOT ' if inst.root else ''}{inst.name} = {inst.shape_text} reshape({sliced})",
    ]

  def collective_permute(self, inst: Instruction) -> str:
    if len(inst.operands) != 1:
      raise UnsupportedProgram(f"collective-permute {inst.name} has {len(inst.operands)} operands")
    da = self.assignment
    replicas, partitions = da.shape
    cross_partition = inst.attr("channel_id") is not None
    if cross_partition and replicas == 1:
      device_group = da[0, :]
    elif not cross_partition and partitions == 1:
      device_group = da[:, 0]
    else:
      raise UnsupportedProgram(f"collective-permute {inst.name} over {replicas} replicas x {partitions} partitions")
    pairs = rg.parse_pairs(inst.attr("source_target_pairs"))
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    if any(not 0 <= i < len(device_group) for i in sources + targets) or len(set(sources)) != len(sources) or \
        len(set(targets)) != len(targets):
      raise UnsupportedProgram(
          f"collective-permute {inst.name}: source_target_pairs={inst.attr('source_target_pairs')} names an id "
          f"outside 0..{len(device_group) - 1} or a source or target twice")
    config = {table.DEVICE_GROUP.key: _dense(device_group), table.PAIRS.key: _dense([i for p in pairs for i in p])}
    shape = _array_result(inst)
    return self.custom_call(inst.indent, inst.name, shape, None, inst.operands[0], self.operand_shape(inst, 0),
                            table.COLLECTIVE_PERMUTE.name, config, inst.root)

  def ragged_all_to_all(self, inst: Instruction) -> list[str]:
    """jax's lax.ragged_all_to_all: first an all-to-all of each device's
    (output offset, send size) pairs, which tells each receiver where each
    slice it gets goes and how long it is (as jax documents the receive
    side); then our call on the output (in place), the data, the input
    offsets, the send sizes, those pairs and the recv sizes, which checks
    them all and moves the slices (collectives/ragged_plan.h)."""
    if self.engine not in table.RAGGED_ALL_TO_ALL.engines:
      raise UnsupportedProgram(
          f"the program uses lax.ragged_all_to_all ({inst.opcode} {inst.name}), which XLA's CPU engine cannot run "
          f"(jax's CPU backend refuses it too); myplugin runs it on GPUs. On CPUs, exchange padded blocks with "
          f"lax.all_to_all instead")
    if len(inst.operands) != 6:
      raise UnsupportedProgram(f"{inst.opcode} {inst.name} has {len(inst.operands)} operands, not XLA's six")
    data, output, *index = [self.operand_shape(inst, i) for i in range(6)]
    result = _array_result(inst)
    k = index[0].dims[0] if len(index[0].dims) == 1 else 0
    if not data.dims or result != output or output.dtype != data.dtype or output.dims[1:] != data.dims[1:] or \
        any(x.dtype != index[0].dtype or x.dims != (k,) for x in index) or index[0].dtype not in ("s32", "s64"):
      raise UnsupportedProgram(
          f"{inst.opcode} {inst.name} of {', '.join(s.text() for s in (data, output, *index))}: not the shapes "
          f"of lax.ragged_all_to_all (an output like the result, rows like the operand's, and four 1-D int32 or "
          f"int64 arrays of one length)")
    config = self.grouped_config(inst)
    group_size = len(device_groups(inst, self.assignment)[0])
    if k % group_size:
      raise UnsupportedProgram(f"{inst.opcode} {inst.name}: {k} offsets over groups of {group_size} devices; "
                               f"lax.ragged_all_to_all needs a multiple of the axis size")
    io, ss, oo, rs = inst.operands[2:]
    column = ArrayShape(index[0].dtype, (k, 1))
    pairs_shape = ArrayShape(index[0].dtype, (k, 2))
    at, sizes, pairs, got = (self.fresh(inst.name) for _ in range(4))
    self.shapes[pairs] = pairs_shape
    lines = [
        f"{inst.indent}{at} = {column.text()} reshape({oo})",
        f"{inst.indent}{sizes} = {column.text()} reshape({ss})",
        f"{inst.indent}{pairs} = {pairs_shape.text()} concatenate({at}, {sizes}), dimensions={{1}}",
        self.custom_call(inst.indent, got, pairs_shape, None, pairs, pairs_shape, table.ALL_TO_ALL.name, config),
    ]
    operands = [inst.operands[1], inst.operands[0], io, ss, got, rs]
    shapes = [output, data, index[0], index[1], pairs_shape, index[3]]
    self.shapes[inst.name] = result
    lines.append(self.call_line(inst.indent, inst.name, result.text(), operands, shapes,
                                table.RAGGED_ALL_TO_ALL.name, config, inst.root, in_place=True))
    return lines

  def ordered_call(self, inst: Instruction) -> list[str]:
    """A loop, branch or call whose computations communicate: it starts after
    the collectives before it (a fence on its first operand), and the ones
    after it wait for its result."""
    out: list[str] = []
    if self.last is not None and inst.operands and self.fences:
      first = inst.operands[0]
      shape = self.shape_of(first)
      if isinstance(shape, ArrayShape):
        fenced = self.fresh(first)
        out.append(self.fence(inst.indent, fenced, first, shape))
        inst.operands[0] = fenced
      elif isinstance(shape, list) and shape and all(isinstance(e, ArrayShape) for e in shape):
        parts = []
        for i, e in enumerate(shape):
          part = self.fresh(first)
          out.append(f"{inst.indent}{part} = {e.text()} get-tuple-element({first}), index={i}")
          parts.append(part)
        fenced = self.fresh(first)
        out.append(self.fence(inst.indent, fenced, parts[0], shape[0]))
        parts[0] = fenced
        rebuilt = self.fresh(first)
        out.append(f"{inst.indent}{rebuilt} = ({', '.join(e.text() for e in shape)}) tuple({', '.join(parts)})")
        inst.operands[0] = rebuilt
    out.append(inst.line())
    result = self.shapes.get(inst.name)
    if isinstance(result, ArrayShape):
      self.last = inst.name
    elif isinstance(result, list) and result and isinstance(result[0], ArrayShape):
      element = self.fresh(inst.name)
      out.append(f"{inst.indent}{element} = {result[0].text()} get-tuple-element({inst.name}), index=0")
      self.shapes[element] = result[0]
      self.last = element
    return out

  def fence(self, indent, name, operand, shape: ArrayShape) -> str:
    """`operand`, in place, once the latest collective has finished."""
    self.shapes[name] = shape
    return (f"{indent}{name} = {shape.text()} custom-call({operand}, {self.last}), "
            f"custom_call_target=\"{table.ORDER_FENCE.name}\", "
            f"operand_layout_constraints={{{shape.text()}, {self.shapes[self.last].text()}}}, "
            f"output_to_operand_aliasing={{{{}}: (0, {{}})}}, api_version=API_VERSION_TYPED_FFI, backend_config={{}}")

  def line(self, line: str) -> list[str]:
    """One line of a computation, rewritten."""
    inst = parse_instruction(line)
    if inst is None:
      return [line]
    shardings = [a for a in inst.attrs if a.startswith("sharding=")]
    inst.attrs = [a for a in inst.attrs if not a.startswith("sharding=")]
    try:
      self.shapes[inst.name] = inst.shape
    except HloTextError:
      pass  # tokens, dynamic or nested shapes: never a collective's operand we rewrite
    if self.closes(inst):
      return self.ordered_call(inst)
    replaced = self.rewrite(inst)
    return replaced if replaced is not None else [_without(line, shardings) or inst.line()]

  def body(self, lines: list[str]) -> list[str]:
    """A computation's instructions, its all-reduces that each device only
    takes its block of made reduce-scatters (reduce_scatter.py), its
    buckets each made one call."""
    if self.form_reduce_scatters:
      lines = reduce_scatter.form(lines, self.assignment)
    lines = carried_types.carry(lines, self.fresh, self.reducer_of, self.widen_narrow_sums)
    insts = [parse_instruction(l) for l in lines]
    for inst in insts:
      if inst is not None:
        try:
          self.shapes[inst.name] = inst.shape
        except HloTextError:
          pass
    groups = buckets.plan(insts, self.combinable, self.closes_bucket, self.combine_threshold)
    if not groups:
      return [out for l in lines for out in self.line(l)]
    out: list[str] = []
    for node in buckets.schedule(insts, groups):
      if isinstance(node, list):
        for i in node:
          insts[i].attrs = [a for a in insts[i].attrs if not a.startswith("sharding=")]
        out.extend(self.combined([insts[i] for i in node]))
      else:
        out.extend(self.line(lines[node]))
    return out

  def run(self) -> list[str]:
    out: list[str] = []
    body: list[str] | None = None  # the lines of the computation being read
    header_at = 0  # where its header is in `out`
    for line in self.lines:
      if body is not None:
        if line.strip() == "}":
          written = [l for entry in self.body(body) for l in entry.split("\n")]
          if self.pairs:
            written, self.next_group = scheduling_groups.group(written, self.pairs, self.next_group)
            self.pairs = []
          out.extend(written)
          out.append(line)
          body = None
          out[header_at:header_at] = [l for w in self.wrappers for l in w.split("\n")]
          self.wrappers = []
        else:
          body.append(line)
        continue
      if line.startswith("HloModule"):
        out.append(_local_header(line))
        continue
      if computation_header(line):
        self.last = None
        self.current = computation_header(line)
        header_at = len(out)
        out.append(line)
        body = []
        continue
      out.extend(self.line(line))
    if body is not None:
      out.extend(self.body(body))
    return out


def _without(line: str, attrs: list[str]) -> str | None:
  """`line` as written, less `attrs`: an instruction the rewrite leaves is
  kept to the letter (a reprint from its parsed fields could differ, e.g. an
  operand list the reader splits into none); None where an attribute is
  not where the reader found it."""
  for a in attrs:
    at = line.find(", " + a)
    if at < 0:
      return None
    line = line[:at] + line[at + 2 + len(a):]
  return line


def _local_header(line: str) -> str:
  """The module header without the partitioning it no longer has."""
  parts = split_top_level(line[len("HloModule"):])
  drop = ("num_partitions=", "replica_count=", "allow_spmd_sharding_propagation_to_output=",
          "allow_spmd_sharding_propagation_to_parameters=")
  return "HloModule " + ", ".join(p for p in parts if not p.startswith(drop))


def rewrite_module(text: str, assignment, num_devices: int, local_order=None, fences: bool = True,
                   runtime_device_ids: bool = False, combine_threshold: int = 0,
                   form_reduce_scatters: bool = True, streams: bool = False, widen_narrow_sums: bool = True,
                   engine: str = "cpu") -> str:
  """`text` (a partitioned module) with myplugin's collectives.

  assignment: [replicas][partitions] global device ids, as compiled.
  num_devices: the number of global devices in the job.
  local_order: the global devices this process runs, in the order of the
    local program's replicas (default: all of them, in assignment order).
  fences: order loops and branches after earlier collectives (the CPU
    runtime runs independent work concurrently; the GPU one runs a stream in
    order and needs none).
  runtime_device_ids: partition-id and replica-id become calls of our
    handlers, which find the device's global id at run time; the module then
    does not depend on local_order, and its compiled form serves every
    process (a compilation cache entry). Both engines have the handlers.
  combine_threshold: independent all-reduces (all-gathers, reduce-scatters)
    of one computation, of one reduction and device groups, become one call
    of up to this many bytes (buckets.py); 0 makes one call each.
  form_reduce_scatters: an all-reduce that each device only takes its own
    block of becomes a reduce-scatter (reduce_scatter.py).
  streams: each collective call runs on a stream of its own (GPUs: async
    beside the compute stream; see _COLLECTIVE_STREAM).
  widen_narrow_sums: bf16 and f16 sums and products run in f32, rounded
    once, as XLA's CPU engine runs them (carried_types.py; not on GPUs).
  engine: the engine the module is for ("cpu" or "cuda"): a collective only
    one engine has a handler for is refused on the other.
  """
  lines = lines_of(text)
  if streams:
    lines = inline_calls.inline_communicating_calls(lines, _COLLECTIVES)
  da = np.asarray(assignment, dtype=np.int64).reshape(len(assignment), -1)
  order = [int(d) for d in da.reshape(-1)] if local_order is None else [int(d) for d in local_order]
  return "\n".join(_Rewriter(lines, da, num_devices, order, fences, runtime_device_ids,
                                 combine_threshold, form_reduce_scatters, streams,
                                 widen_narrow_sums, engine).run()) + "\n"

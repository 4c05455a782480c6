"""The element types our collectives carry: narrow floats summed as XLA's
CPU engine sums them, float8 arrays moved as bytes.

XLA's CPU compiler normalizes bfloat16 work to f32 before its collectives
run (its float normalization pass), so jax's CPU backend sums bf16 in f32
and rounds once, in every process shape. Our handlers reduce a type in
itself: each process's partial sum rounded to bf16, then rounded again
across processes, one bf16 step off in about a third of the elements.
On the CPU engine, `carry` therefore makes an all-reduce or reduce-scatter
of bf16 or f16 that sums or multiplies run in f32: its operands converted,
its result converted back, rounded once. (f16 too: jax's CPU backend sums
f16 step by step in whatever order its transport takes, so its own result
depends on the process shape; one rounding of the f32 sum is the same in
every shape, and never further from the exact sum.) Maxima and minima are
exact in any type and stay narrow. On GPUs nothing is widened: jax's CUDA
backend hands NCCL the narrow type, and so does ours, with the same bytes.

Our handlers have no float8 arithmetic, and XLA's CPU engine itself sums
float8 in a wider type: a float8 reduction runs in f32 on both engines,
and a float8 gather, all-to-all or permute moves the same bytes as u8
(a bitcast there and back). Anything else is left as it is.
"""

from __future__ import annotations

from typing import Callable

from jax_plugin.spmd.hlo_text import (ArrayShape, HloTextError, Instruction, parse_instruction, parse_shape,
                                      split_top_level)

_REDUCING = {"all-reduce", "reduce-scatter"}
_MOVING = {"all-gather", "all-to-all", "collective-permute"}
_NARROW_FLOATS = {"bf16", "f16"}
# The reducers whose rounding depends on where a narrow type rounds.
_ROUNDING_REDUCERS = {"add", "multiply"}


def _float8(dtype: str) -> bool:
  return dtype.startswith("f8")


def _with_dtype(shape_text: str, dtype: str) -> str:
  """An array shape's text with another element type (dims and layout kept)."""
  return dtype + shape_text[shape_text.index("["):]


def carry(lines: list[str], fresh: Callable[[str], str], reducer_of: Callable[[Instruction], str | None],
          widen_narrow_sums: bool) -> list[str]:
  """One computation's lines with the collectives above carried in the
  types our handlers reduce and move (see the module's docstring).
  fresh(base): a new instruction name; reducer_of(inst): the op its
  reduction body applies (hlo_text.Computation.reducer), or None."""
  shapes: dict[str, str] = {}  # name -> shape text, of the lines read so far
  out: list[str] = []
  for line in lines:
    inst = parse_instruction(line)
    if inst is None:
      out.append(line)
      continue
    shapes[inst.name] = inst.shape_text
    replaced = None
    if inst.opcode in _REDUCING or inst.opcode in _MOVING:
      try:
        replaced = _carried(inst, shapes, fresh, reducer_of, widen_narrow_sums)
      except HloTextError:
        replaced = None  # a shape we do not read: the rewrite says what it cannot run
    out.extend([line] if replaced is None else replaced)
  return out


def _target(dtype: str, inst: Instruction, reducer_of, widen_narrow_sums: bool) -> tuple[str, str] | None:
  """(the type `dtype` is carried in, the conversion there), or None to keep it."""
  if inst.opcode in _MOVING:
    return ("u8", "bitcast-convert") if _float8(dtype) else None
  if _float8(dtype):
    return "f32", "convert"
  if widen_narrow_sums and dtype in _NARROW_FLOATS and reducer_of(inst) in _ROUNDING_REDUCERS:
    return "f32", "convert"
  return None


def _carried(inst: Instruction, shapes: dict[str, str], fresh, reducer_of,
             widen_narrow_sums: bool) -> list[str] | None:
  result = inst.shape
  results = result if isinstance(result, list) else [result]
  if len(results) != len(inst.operands) or not all(isinstance(r, ArrayShape) for r in results):
    return None
  targets = [_target(r.dtype, inst, reducer_of, widen_narrow_sums) for r in results]
  if not any(targets):
    return None
  lines: list[str] = []
  operands = []
  for operand, target, r in zip(inst.operands, targets, results):
    if target is None or operand not in shapes:
      if target is not None:
        return None  # an operand we cannot see the shape of (a tuple element): left as it is
      operands.append(operand)
      continue
    shape = parse_shape(shapes[operand])  # not an array at all: HloTextError, which carry() takes
    if not isinstance(shape, ArrayShape) or shape.dtype != r.dtype:
      return None  # not an array of the result's type (no printer writes one): left for the rewrite to refuse
    carried = fresh(operand)
    lines.append(f"{inst.indent}{carried} = {_with_dtype(shapes[operand], target[0])} {target[1]}({operand})")
    operands.append(carried)
  if isinstance(result, list):
    texts = split_top_level(inst.shape_text.strip()[1:-1])
  else:
    texts = [inst.shape_text]
  wide_texts = [t if g is None else _with_dtype(t.strip(), g[0]) for t, g in zip(texts, targets)]
  wide = fresh(inst.name)
  wide_shape = f"({', '.join(wide_texts)})" if isinstance(result, list) else wide_texts[0]
  collective = Instruction(inst.indent, False, wide, wide_shape, inst.opcode, operands, list(inst.attrs))
  lines.append(collective.line())
  root = "ROOT " if inst.root else ""
  if not isinstance(result, list):
    g = targets[0]
    lines.append(f"{inst.indent}{root}{inst.name} = {inst.shape_text} {g[1]}({wide})")
    return lines
  elements = []
  for i, (text, wide_text, g) in enumerate(zip(texts, wide_texts, targets)):
    element = fresh(inst.name)
    lines.append(f"{inst.indent}{element} = {wide_text} get-tuple-element({wide}), index={i}")
    if g is not None:
      back = fresh(inst.name)
      lines.append(f"{inst.indent}{back} = {text.strip()} {g[1]}({element})")
      element = back
    elements.append(element)
  lines.append(f"{inst.indent}{root}{inst.name} = {inst.shape_text} tuple({', '.join(elements)})")
  return lines

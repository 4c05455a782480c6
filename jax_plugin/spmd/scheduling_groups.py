"""Puts each of a computation's all-reduce pairs (on GPUs: an async pair of
the rewrite's own, rewrite.py Rewriter.on_stream) in a scheduling group of
XLA's with the first matmul after it that does not need its result.

XLA's latency-hiding scheduler issues the members of one group
(`_scheduling_group_id` in their frontend attributes) together: the GEMM
runs between the pair's start and done, beside the all-reduce. Left to
itself it gives a custom call's pair no more than one GEMM, and a data-
parallel step's gradient all-reduces then come after most of the backward
pass: `dp12` of bench/gpu_schedule.py had 31 % of its GEMM work beside a
collective, jax's own 38 %; grouped, 62 % on jax 0.11.2's and 0.12's
engines. Only all-reduces: an FSDP step's all-gathers, grouped the same
way, were held to the one GEMM after them instead of being issued early
(fsdp4 87 % to 30 %), and its reduce-scatters gained nothing. A matmul that
depends on the result (a tensor-parallel layer's next one) is never taken:
the group could not be scheduled.
"""
from __future__ import annotations

from jax_plugin.spmd.hlo_text import parse_instruction

_KEY = "_scheduling_group_id"
_MATMULS = ("dot", "convolution")


def group(lines: list[str], pairs: list[tuple[str, str]], first_id: int) -> tuple[list[str], int]:
  """`lines` (one computation's, one instruction a line) with each pair
  (start, done names) grouped with its matmul; the ids from `first_id` on,
  and the next id free."""
  out = list(lines)
  insts = [parse_instruction(line) for line in lines]  # once: each pair scans the lines after it
  at = {inst.name: i for i, inst in enumerate(insts) if inst is not None}
  next_id = first_id
  for start, done in pairs:
    if start not in at or done not in at:
      continue
    tainted = {done}
    matmul = None
    for i in range(at[done] + 1, len(lines)):
      inst = insts[i]
      if inst is None:
        continue
      if any(o.split("#")[0] in tainted for o in inst.operands):
        tainted.add(inst.name)
      elif inst.opcode in _MATMULS and _KEY not in lines[i]:
        matmul = i
        break
    if matmul is None:
      continue
    for i in (at[start], at[done], matmul):
      out[i] = _with_group(out[i], next_id)
    next_id += 1
  return out, next_id


def _with_group(line: str, gid: int) -> str:
  attribute = f'{_KEY}="{gid}"'
  if "frontend_attributes={" in line:
    return line.replace("frontend_attributes={", "frontend_attributes={" + attribute + ",", 1)
  return f"{line}, frontend_attributes={{{attribute}}}"

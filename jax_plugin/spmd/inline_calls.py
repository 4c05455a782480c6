"""Inlines, ahead of the rewrite, the `call`s that XLA's call inliner would
inline, where the called computation holds a collective: a shard_map body.

On GPUs each collective becomes an async pair of the rewrite's own
(rewrite.py, Rewriter.on_stream). Left inside a called computation, the
pair would be cloned into the caller by XLA's call inliner, but the
computation its start runs (on another execution thread, which the
inliner's clean-up does not reach) would then have two callers, and XLA's
copy insertion refuses such a call graph. Inlined here, the pair is written
in the caller once.

Only what the call inliner would do anyway, and only where it is plain: a
computation called once, by a `call` without `inlineable="false"`, whose
parameters and root nothing names but the operand lists. Anything else is
left as it is (the rewrite keeps the annotated `call` form there).
"""
from __future__ import annotations

import re

from jax_plugin.spmd.hlo_text import callees, computation_header, computations, parse_instruction

_NAME = re.compile(r"%[^\s,(){}=]+")


def _operand_span(line: str, opcode: str) -> tuple[int, int] | None:
  """Where the operand list of the instruction on `line` is (inside the
  parentheses after its opcode), or None."""
  eq = line.find(" = ")
  at = line.find(f" {opcode}(", eq) if eq >= 0 else -1
  if at < 0:
    return None
  start = at + len(opcode) + 2
  depth = 1
  for i in range(start, len(line)):
    if line[i] == "(":
      depth += 1
    elif line[i] == ")":
      depth -= 1
      if depth == 0:
        return start, i
  return None


def _renamed(line: str, opcode: str, names: dict[str, str]) -> str | None:
  """`line` with the names in its operand list renamed; None where one of
  `names` appears anywhere else on it."""
  span = _operand_span(line, opcode)
  if span is None:
    return None
  a, b = span
  outside = line[:a] + line[b:]
  head = outside[outside.find(" = "):]
  if any(n in names for n in _NAME.findall(head)):
    return None
  inner = _NAME.sub(lambda m: names.get(m.group(0), m.group(0)), line[a:b])
  return line[:a] + inner + line[b:]


def inline_communicating_calls(lines: list[str], collectives: set[str]) -> list[str]:
  """`lines` with each plain `call` of a computation that holds (directly or
  in what it calls) an instruction of `collectives` replaced by that
  computation's instructions (module-unique names, as XLA prints them, so
  no renaming beyond its parameters and root); nested ones, one level a
  pass."""
  for _ in range(16):  # nesting deeper than this keeps its calls
    inlined = _one_level(lines, collectives)
    if inlined is None:
      break
    lines = inlined
  return lines


def _one_level(lines: list[str], collectives: set[str]) -> list[str] | None:
  comps = computations(lines)
  memo: dict[str, bool] = {}

  def communicates(name: str, seen: frozenset = frozenset()) -> bool:
    if name not in memo:
      c = comps.get(name)
      memo[name] = c is not None and name not in seen and (
          bool(c.opcodes & collectives) or any(communicates(k, seen | {name}) for k in c.callees))
    return memo[name]

  bodies: dict[str, tuple[int, int]] = {}  # computation -> (header line, closing line)
  sites: dict[str, list[int]] = {}  # computation -> lines that name it as a callee
  current, start = None, 0
  for i, line in enumerate(lines):
    if current is None:
      name = computation_header(line)
      if name:
        current, start = name, i
      continue
    if line.strip() == "}":
      bodies[current] = (start, i)
      current = None
      continue
    inst = parse_instruction(line)
    if inst is not None:
      for c in callees(inst):
        sites.setdefault(c, []).append(i)
  chosen: dict[str, int] = {}
  for callee, where in sites.items():
    if len(where) != 1 or callee not in bodies or not communicates(callee):
      continue
    call = parse_instruction(lines[where[0]])
    if call is not None and call.opcode == "call" and callees(call) == [callee] and \
        'inlineable="false"' not in (call.attr("frontend_attributes") or ""):
      chosen[callee] = where[0]
  # One level a pass: a call inside a computation inlined now waits.
  chosen = {c: at for c, at in chosen.items()
            if not any(bodies[o][0] < at < bodies[o][1] for o in chosen if o != c)}
  replaced: dict[int, list[str]] = {}
  for callee, at in chosen.items():
    body = _inlined(lines, bodies[callee], parse_instruction(lines[at]))
    if body is not None:
      replaced[at] = body
  if not replaced:
    return None
  dropped = {c for c, at in chosen.items() if at in replaced}
  skip = {i for c in dropped for i in range(bodies[c][0], bodies[c][1] + 1)}
  out = []
  for i, line in enumerate(lines):
    if i not in skip:
      out.extend(replaced.get(i, [line]))
  return out


def _inlined(lines: list[str], span: tuple[int, int], call) -> list[str] | None:
  """The instructions of the computation at `span` as they stand in for
  `call`, or None where that is not plain."""
  first, last = span
  insts = [(i, parse_instruction(lines[i])) for i in range(first + 1, last)]
  if any(inst is None for _, inst in insts if lines[_].strip()):
    return None
  insts = [(i, inst) for i, inst in insts if inst is not None]
  names: dict[str, str] = {}
  root = None
  for _, inst in insts:
    if inst.opcode == "parameter":
      try:
        index = int(lines[_].split("parameter(", 1)[1].split(")", 1)[0])
      except (IndexError, ValueError):
        return None
      if index >= len(call.operands):
        return None
      names[inst.name] = call.operands[index]
    if inst.root:
      root = inst
  if root is None:
    return None
  indent = re.match(r"\s*", lines[first + 1]).group(0) if last > first + 1 else "  "
  prefix = "ROOT " if call.root else ""
  out = []
  if root.opcode == "parameter":
    for _, inst in insts:
      if inst.opcode != "parameter":
        renamed = _renamed(lines[_], inst.opcode, names)
        if renamed is None:
          return None
        out.append(renamed)
    out.append(f"{indent}{prefix}{call.name} = {call.shape_text} copy({names[root.name]})")
    return out
  names[root.name] = call.name
  for i, inst in insts:
    if inst.opcode == "parameter":
      continue
    renamed = _renamed(lines[i], inst.opcode, names)
    if renamed is None:
      return None
    if inst.root:
      body = renamed.strip()[len("ROOT "):]
      body = call.name + body[len(inst.name):]
      renamed = f"{indent}{prefix}{body}"
    out.append(renamed)
  return out

"""Just enough of XLA's HLO text format to find and replace instructions.

An HLO module prints one instruction per line:

    [ROOT ]%name = <shape> <opcode>(<operands>)[, attr=value, ...]

The rewrite only needs the instruction's name, shape, opcode, operand names
and attributes, and which computation each one sits in. jaxlib's own parser
(`hlo.hlo_module_from_text`) checks the edited text afterwards, so a line we
misread becomes a parse error there, never a silently different program.
"""

from __future__ import annotations

import dataclasses
import functools
import re

_ASSIGN = re.compile(r"^(\s*)(ROOT\s+)?(%?[^\s=]+)\s*=\s*(.*)$")
_ARRAY_SHAPE = re.compile(r"^([a-z][a-z0-9]*)\[([0-9,]*)\](\{[^}]*\})?$")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?(%?[^\s(]+)\s*(\(.*)?\{\s*$")

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}


class HloTextError(ValueError):
  pass


class UnsupportedProgram(HloTextError):
  """A construct of the program that the multi-process path cannot run
  (the compile reports it as UNIMPLEMENTED, by this class's name)."""


def to_int(digits: str) -> int:
  """A number of the text, refused past Python's limit on the digits of
  int() (ValueError there, not ours)."""
  try:
    return int(digits)
  except ValueError:
    raise HloTextError(f"cannot read the number {digits[:40]!r}") from None


# A string literal (to its closing quote, or to the end of an unterminated
# one; a backslash escapes the character after it) or one character that
# brackets or separates. The scan is a regex so that Python steps only over
# these, not over every character of a line (the rewrite reads each line of
# a module three times).
_TOKENS = {}


def _tokens(sep: str):
  if sep not in _TOKENS:
    _TOKENS[sep] = re.compile(r'"(?:[^"\\]|\\[\s\S])*(?:"|\\)?|[][(){}' + re.escape(sep) + "]")
  return _TOKENS[sep]


_STRING = re.compile(r'"(?:[^"\\]|\\[\s\S])*"')


def lines_of(text: str) -> list[str]:
  """The module's lines, each ending at a newline, as for jaxlib's parser
  (str.splitlines also ends one at a form feed or "\\x1c" inside a string).
  XLA escapes a newline inside a string; a string that does not end on its
  line, or an instruction whose brackets close on a later line (a mutated
  module), is refused: the rewrite reads an instruction per line, and would
  leave the rest of one that spans lines behind."""
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  for line in lines:
    if '"' in line and '"' in _STRING.sub("", line):
      raise HloTextError(f"a string that does not end on its line: {line.strip()[:200]}")
    # A computation ends on a line of its own (with its attributes, if any):
    # more after the brace would be read as still inside it.
    after = line.strip()[1:].strip() if line.strip().startswith("}") else ""
    if after and not after.startswith(","):
      raise HloTextError(f"a computation's end with more on its line: {line.strip()[:200]}")
    if _ASSIGN.match(line) and not line.lstrip().startswith(("HloModule", "ENTRY")):
      depth = 0
      for _, _, depth in _outside_strings(line, ","):
        pass
      if depth != 0:
        raise HloTextError(f"an instruction that does not end on its line: {line.strip()[:200]}")
  return lines


def _outside_strings(text: str, sep: str, start: int = 0):
  """(index, character, bracket depth after it) of every bracket and `sep`
  of `text` from `start` that is not inside a string literal."""
  depth = 0
  for m in _tokens(sep).finditer(text, start):
    c = m.group()
    if c[0] == '"':
      continue
    depth += 1 if c in OPENERS else -1 if c in CLOSERS else 0
    yield m.start(), c, depth


def matching(text: str, start: int) -> int:
  """Index just past the bracket that closes the one at `start`."""
  for i, c, depth in _outside_strings(text, ",", start):
    if c in CLOSERS and depth == 0:
      return i + 1
  raise HloTextError(f"unbalanced brackets in: {text[:200]}")


def split_top_level(text: str, sep: str = ",") -> list[str]:
  """Splits at `sep` (one character, not a bracket or a quote) outside brackets and strings."""
  parts, begin = [], 0
  for i, c, depth in _outside_strings(text, sep):
    if c == sep and depth == 0:
      parts.append(text[begin:i].strip())
      begin = i + 1
  tail = text[begin:].strip()
  if tail:
    parts.append(tail)
  return parts


@dataclasses.dataclass(frozen=True)
class ArrayShape:
  dtype: str
  dims: tuple[int, ...]

  def text(self, dims: tuple[int, ...] | None = None) -> str:
    """The shape with a row-major (descending) layout: the layout our handlers read."""
    d = self.dims if dims is None else dims
    if not d:
      return f"{self.dtype}[]"
    layout = ",".join(str(i) for i in reversed(range(len(d))))
    return f"{self.dtype}[{','.join(str(x) for x in d)}]{{{layout}}}"


def parse_shape(text: str) -> ArrayShape | list[ArrayShape]:
  """An array shape, or the elements of a (non-nested) tuple shape."""
  text = text.strip()
  if text.startswith("("):
    return [parse_shape(t) for t in split_top_level(text[1:-1])]
  m = _ARRAY_SHAPE.match(text)
  if not m:
    raise UnsupportedProgram(f"a collective of shape {text!r}: myplugin rewrites collectives of static arrays and "
                             f"tuples of them, not dynamic or nested shapes")
  dims = tuple(to_int(d) for d in m.group(2).split(",") if d)
  return ArrayShape(m.group(1), dims)


@dataclasses.dataclass
class Instruction:
  indent: str
  root: bool
  name: str
  shape_text: str
  opcode: str
  operands: list[str]
  attrs: list[str]

  def attr(self, key: str) -> str | None:
    for a in self.attrs:
      k, _, v = a.partition("=")
      if k.strip() == key:
        return v.strip()
    return None

  @property
  def shape(self):
    return parse_shape(self.shape_text)

  def line(self) -> str:
    tail = "".join(", " + a for a in self.attrs)
    return (f"{self.indent}{'ROOT ' if self.root else ''}{self.name} = {self.shape_text} "
            f"{self.opcode}({', '.join(self.operands)}){tail}")


def parse_instruction(line: str) -> Instruction | None:
  """The instruction on `line`, or None for a line that holds none."""
  fields = _instruction_fields(line)
  if fields is None:
    return None
  indent, root, name, shape_text, opcode, operands, attrs = fields
  # Fresh lists: the rewrite edits an instruction's operands and attributes.
  return Instruction(indent, root, name, shape_text, opcode, list(operands), list(attrs))


# The rewrite reads every line three times (names, computations, the rewrite
# itself), and the compile rewrites a module once per device assignment.
_INDEX_MARK = re.compile(r"^/\*index=[0-9]+\*/")


@functools.lru_cache(maxsize=8192)
def _instruction_fields(line: str) -> tuple | None:
  m = _ASSIGN.match(line)
  if not m or line.lstrip().startswith(("HloModule", "ENTRY")):
    return None
  indent, root, name, rest = m.group(1), bool(m.group(2)), m.group(3), m.group(4)
  if rest.startswith("("):
    end = matching(rest, 0)
  else:
    end = rest.find(" ")
    if end < 0:
      return None
  shape_text, rest = rest[:end], rest[end:].lstrip()
  om = re.match(r"^([a-z][\w\-]*)\(", rest)
  if not om:
    return None
  open_at = om.end() - 1
  close = matching(rest, open_at)
  # Older printers put each operand's shape before its name: keep the name.
  # (A constant's "operand" is its literal: kept as it is.) The printer marks
  # every fifth operand with its index (`/*index=5*/%x`): not part of it.
  operands = [o.split()[-1] if " " in o and o.split()[-1].startswith("%") else o
              for o in (_INDEX_MARK.sub("", o) for o in split_top_level(rest[open_at + 1:close - 1]))]
  tail = rest[close:].strip()
  if tail and not tail.startswith(","):
    raise HloTextError(f"cannot read the attributes of: {line.strip()[:200]}")
  attrs = []
  for a in split_top_level(tail[1:]) if tail else []:
    # A mesh of replica groups whose devices are not in iota order prints its
    # ids after a comma of its own: `mesh[...], device_ids=(...) {...}`.
    if a.startswith("device_ids=") and attrs and attrs[-1].startswith("replica_groups=mesh"):
      attrs[-1] += ", " + a
    else:
      attrs.append(a)
  return indent, root, name, shape_text, om.group(1), tuple(operands), tuple(attrs)


@dataclasses.dataclass
class Computation:
  name: str
  entry: bool
  first_line: int  # index of the header line
  root_opcode: str | None = None
  # The element-wise op the computation applies to its two parameters, seen
  # through copies (`add` for `lambda a, b: a + b`): what a reduction body
  # reduces with. None where the computation is anything else.
  reducer: str | None = None
  opcodes: set[str] = dataclasses.field(default_factory=set)
  callees: set[str] = dataclasses.field(default_factory=set)


_CALLEE_ATTRS = ("body", "condition", "to_apply", "true_computation", "false_computation", "branch_computations",
                 "calls")


def computation_header(line: str) -> str | None:
  """The name of the computation that `line` opens, if it opens one."""
  stripped = line.strip()
  if stripped.startswith("HloModule"):
    return None
  m = _COMPUTATION.match(stripped)
  return m.group(2) if m else None


def callees(inst: Instruction) -> list[str]:
  """The computations an instruction calls (loop bodies, branches, reducers)."""
  found: dict[str, str] = {}
  for a in inst.attrs:  # one pass: the first of each key counts, as in attr()
    k, _, v = a.partition("=")
    k = k.strip()
    if k in _CALLEE_ATTRS and k not in found:
      found[k] = v.strip()
  out = []
  for key in _CALLEE_ATTRS:
    v = found.get(key)
    if v:
      out += [c.strip() for c in v.strip("{}").split(",") if c.strip()]
  return out


# A reduction body has two parameters and one op; a copy or two may sit between
# (a sharding constraint inside the body of a partly manual shard_map's psum is
# a copy of the sum after partitioning). Longer bodies are no reducer.
_REDUCER_MOST_INSTRUCTIONS = 8


def _reducer(insts: dict[str, Instruction], root: Instruction | None) -> str | None:
  """The op `root` applies to the computation's two parameters, seen through copies."""
  def through_copies(inst: Instruction | None) -> Instruction | None:
    # At most one step per instruction: a copy of itself (which no printer
    # writes, but a parsed text may hold) is no reducer, not a loop forever.
    for _ in range(len(insts) + 1):
      if inst is None or inst.opcode != "copy" or len(inst.operands) != 1:
        return inst
      inst = insts.get(inst.operands[0])
    return None

  op = through_copies(root)
  if op is None or len(op.operands) != 2 or sum(i.opcode == "parameter" for i in insts.values()) != 2:
    return None
  a, b = (through_copies(insts.get(o)) for o in op.operands)
  if a is None or b is None or a.opcode != "parameter" or b.opcode != "parameter" or a.name == b.name:
    return None
  return op.opcode


def computations(lines: list[str]) -> dict[str, Computation]:
  """The computations of a module, by name, with their root instruction."""
  found: dict[str, Computation] = {}
  current: Computation | None = None
  insts: dict[str, Instruction] = {}  # the current computation's, while it is short
  root: Instruction | None = None
  for i, line in enumerate(lines):
    stripped = line.strip()
    if current is None:
      name = computation_header(line)
      if name:
        current = Computation(name, stripped.startswith("ENTRY"), i)
        insts, root = {}, None
      continue
    if stripped == "}":
      if len(insts) <= _REDUCER_MOST_INSTRUCTIONS:
        current.reducer = _reducer(insts, root)
      found[current.name] = current
      current = None
      continue
    inst = parse_instruction(line)
    if inst is None:
      continue
    current.opcodes.add(inst.opcode)
    current.callees.update(callees(inst))
    if len(insts) <= _REDUCER_MOST_INSTRUCTIONS:
      insts[inst.name] = inst
    if inst.root:
      current.root_opcode = inst.opcode
      root = inst
  return found

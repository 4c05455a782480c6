"""What a compiled GPU program's schedule does with its collectives, read
from its text (`compiled.as_text()`: the scheduled module, instructions in
the order the GPU runs them).

For each program: the collectives (XLA's own, and myplugin's custom calls,
a combined call counted once per operand), the async pairs (`*-start` /
`*-done`, XLA's explicit-stream `call-start` included), the ring bytes a
device moves, and the share of its GEMM FLOPs issued while at least one
collective is in flight (between a start and its done). A loop body counts
as many times as its known trip count.

Ring bytes a device, as nccl-tests counts bus bytes: all-reduce of S bytes
over n devices 2(n-1)/n S; all-gather (S its result), reduce-scatter (S its
operand) and all-to-all (n-1)/n S; collective-permute S; ragged all-to-all
(n-1)/n of its data operand, as if the run's routing spread it evenly (its
real bytes are the run's).
"""
from __future__ import annotations

import dataclasses
import json
import re

_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                  "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1}
_XLA_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
              "ragged-all-to-all")
_OURS = {"myplugin_all_reduce": "all-reduce", "myplugin_all_gather": "all-gather",
         "myplugin_reduce_scatter": "reduce-scatter", "myplugin_all_to_all": "all-to-all",
         "myplugin_collective_permute": "collective-permute", "myplugin_ragged_all_to_all": "ragged-all-to-all"}
_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")

_ASSIGN = re.compile(r"^\s*(?:ROOT\s+)?(%?[\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"\s([a-z][\w\-]*)\(")
_ARRAY = re.compile(r"([a-z]+[0-9]*(?:e[0-9]m[0-9]\w*)?)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?(%?[\w.\-]+)\s*\((.*)\)\s*->\s*.*\{\s*$")


@dataclasses.dataclass
class Inst:
  name: str
  shape: str  # the result's shape text
  opcode: str
  operands: list[str]
  rest: str  # the attributes' text


@dataclasses.dataclass
class Schedule:
  collectives: int = 0
  kinds: dict = dataclasses.field(default_factory=dict)
  async_pairs: int = 0
  ring_bytes: float = 0.0
  gemm_flops: float = 0.0
  gemm_flops_in_flight: float = 0.0

  @property
  def in_flight_share(self) -> float:
    return self.gemm_flops_in_flight / self.gemm_flops if self.gemm_flops else 0.0


def _split_top(text: str) -> list[str]:
  parts, depth, begin = [], 0, 0
  for i, c in enumerate(text):
    if c in "([{":
      depth += 1
    elif c in ")]}":
      depth -= 1
    elif c == "," and depth == 0:
      parts.append(text[begin:i].strip())
      begin = i + 1
  if text[begin:].strip():
    parts.append(text[begin:].strip())
  return parts


def _parse(line: str) -> Inst | None:
  m = _ASSIGN.match(line)
  if not m or line.lstrip().startswith(("ENTRY", "HloModule")):
    return None
  name, rest = m.group(1), m.group(2)
  op = _OPCODE.search(rest)
  if op is None:
    return None
  shape = rest[:op.start()].strip()
  depth, i = 0, op.end() - 1
  for j in range(i, len(rest)):
    depth += 1 if rest[j] == "(" else -1 if rest[j] == ")" else 0
    if depth == 0:
      break
  operands = [o.split()[-1] for o in _split_top(rest[i + 1:j]) if o.split()]
  return Inst(name, shape, op.group(1), operands, rest[j + 1:])


def _arrays(shape: str) -> list[tuple[str, list[int]]]:
  return [(m.group(1), [int(d) for d in m.group(2).split(",") if d]) for m in _ARRAY.finditer(shape)]


def _bytes(dtype: str, dims: list[int]) -> int:
  n = 1
  for d in dims:
    n *= d
  return n * _ELEMENT_BYTES.get(dtype, 4)


def _group_size(rest: str, default: int) -> int:
  m = re.search(r"group_size = (\d+)", rest)
  if m:
    return int(m.group(1))
  m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", rest)
  if m:
    return int(m.group(2))
  m = re.search(r"replica_groups=\{\{([0-9,]*)\}", rest)
  if m:
    return len(m.group(1).split(","))
  return default


def _ring(kind: str, nbytes: int, n: int) -> float:
  if kind == "all-reduce":
    return 2 * (n - 1) / n * nbytes
  if kind == "collective-permute":
    return float(nbytes)
  return (n - 1) / n * nbytes


# A collective smaller than this (a loss's scalar sum) hides no
# communication worth the name: GEMMs beside it do not count as overlapped.
MIN_OVERLAP_BYTES = 1 << 16


def analyse(text: str, num_devices: int) -> Schedule:
  """The schedule of a compiled module's text."""
  comps: dict[str, list[Inst]] = {}
  params: dict[str, str] = {}
  entry, current = None, None
  for line in text.splitlines():
    h = _HEADER.match(line.strip())
    if h and current is None:
      current = h.group(2)
      comps[current] = []
      if h.group(1):
        entry = current
      for p in _split_top(h.group(3)):
        n, _, t = p.partition(":")
        params[n.strip().lstrip("%")] = t.strip()
      continue
    if line.strip().startswith("}"):  # `}` or `}, execution_thread="parallel"`
      current = None
      continue
    if current is not None:
      inst = _parse(line)
      if inst is not None:
        comps[current].append(inst)
  shapes = dict(params)
  for insts in comps.values():
    for i in insts:
      shapes[i.name.lstrip("%")] = i.shape
  out = Schedule()
  if entry is None:
    return out
  seen: set[str] = set()

  def shape_of(name: str) -> str:
    return shapes.get(name.lstrip("%").split("#")[0], "")

  def collective(inst: Inst, times: int) -> int:
    """Counts `inst` if it is a collective (XLA's, or one of our calls):
    one per instruction or call, its bytes those of all its operands.
    Returns its payload bytes (0: not a collective)."""
    start = inst.opcode.endswith("-start")
    if inst.opcode.removesuffix("-start") in _XLA_KINDS:
      kind = inst.opcode.removesuffix("-start")
      if start:  # ((operands...), results...): a start's shape holds both
        parts = _split_top(inst.shape.strip()[1:-1])
        operands, results = _arrays(parts[0]), _arrays(", ".join(parts[1:]))
      else:
        operands, results = [a for o in inst.operands for a in _arrays(shape_of(o))], _arrays(inst.shape)
    elif inst.opcode == "custom-call":
      target = re.search(r'custom_call_target="([^"]+)"', inst.rest)
      kind = _OURS.get(target.group(1)) if target else None
      if kind is None:
        return 0
      results = _arrays(inst.shape)
      # the operands after the data are the order chain's
      operands = [a for o in inst.operands for a in _arrays(shape_of(o))][:len(results)]
    else:
      return 0
    chosen = results if kind == "all-gather" else operands
    if kind == "collective-permute":
      chosen = chosen[:1]
    if kind == "ragged-all-to-all":
      # Its bytes are the run's routing: counted as its whole data operand
      # spread evenly (XLA's operand 0; ours reads the output first).
      data = [a for o in inst.operands for a in _arrays(shape_of(o))] if not start else operands
      chosen = data[1:2] if inst.opcode == "custom-call" else data[:1]
    n = _group_size(inst.rest, num_devices)
    out.collectives += times
    out.kinds[kind] = out.kinds.get(kind, 0) + times
    out.ring_bytes += sum(_ring(kind, _bytes(t, d), n) for t, d in chosen) * times
    return max(sum(_bytes(t, d) for t, d in chosen), 1)

  def gemm_flops(inst: Inst) -> float:
    if inst.opcode == "custom-call":
      target = re.search(r'custom_call_target="([^"]+)"', inst.rest)
      if not target or not target.group(1).startswith(_GEMM_TARGETS):
        return 0.0
      return _dot_flops(inst, shape_of)
    if inst.opcode == "fusion":
      called = re.search(r"calls=(%?[\w.\-]+)", inst.rest)
      if not called or "gemm" not in inst.rest:
        return 0.0
      return sum(_dot_flops(i, shape_of) for i in comps.get(called.group(1), []) if i.opcode == "dot")
    return 0.0

  def walk(comp: str, times: int) -> None:
    if comp in seen and times == 1:
      return
    seen.add(comp)
    in_flight: set[str] = set()
    for inst in comps.get(comp, []):
      if inst.opcode.endswith("-start") and inst.opcode != "copy-start":
        out.async_pairs += times
        if inst.opcode in ("async-start", "call-start"):
          called = re.search(r"(?:calls|to_apply)=(%?[\w.\-]+)", inst.rest)
          payload = sum(collective(i, times) for i in comps.get(called.group(1), [])) if called else 0
        else:
          payload = collective(inst, times)
        if payload >= MIN_OVERLAP_BYTES:
          in_flight.add(inst.name)
        continue
      if inst.opcode.endswith("-done") and inst.opcode != "copy-done":
        for o in inst.operands:
          in_flight.discard(o.split("#")[0])
        continue
      if collective(inst, times):
        continue
      flops = gemm_flops(inst) * times
      out.gemm_flops += flops
      if in_flight:
        out.gemm_flops_in_flight += flops
      if inst.opcode == "while":
        body = re.search(r"body=(%?[\w.\-]+)", inst.rest)
        trips = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', inst.rest)
        if body:
          walk(body.group(1), times * (int(trips.group(1)) if trips else 1))
      elif inst.opcode in ("call", "conditional"):
        for c in re.findall(r"(?:to_apply|calls|branch_computations)=\{?(%?[\w.\-]+)", inst.rest):
          walk(c, times)

  walk(entry, 1)
  return out


def _dot_flops(inst: Inst, shape_of) -> float:
  """2 x result elements x contracted elements of a dot or GEMM call."""
  result = _arrays(inst.shape)
  lhs = _arrays(shape_of(inst.operands[0])) if inst.operands else []
  if not result or not lhs:
    return 0.0
  contracting = re.search(r'lhs_contracting_dim(?:ension)?s[":=\[{ ]+([0-9",\s]*)', inst.rest)
  dims = [int(d) for d in re.findall(r"\d+", contracting.group(1))] if contracting else []
  k = 1
  for d in dims:
    if d < len(lhs[0][1]):
      k *= lhs[0][1][d]
  n = 1
  for d in result[0][1]:
    n *= d
  return 2.0 * n * k


def to_json(s: Schedule) -> str:
  return json.dumps({**dataclasses.asdict(s), "in_flight_share": s.in_flight_share})

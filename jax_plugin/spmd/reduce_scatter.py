"""Reduce-scatters formed from what the SPMD partitioner writes instead.

A reduction whose result stays sharded (an FSDP gradient, a contraction
over a sharded dimension with a sharded result) comes out of the
partitioner as an all-reduce of the whole array, then a `dynamic-slice` of
each device's own block, at an offset computed from `partition-id` or
`replica-id` (a table lookup). That moves the whole array where a
reduce-scatter moves one block a device: about twice the bytes of a
ring reduce-scatter. XLA's GPU pipeline turns the pair into a
reduce-scatter late (its reduce-scatter creator); the module the rewrite
reads comes from before that, and the CPU engine has no such pass.

`form` does the same on one computation's lines: an all-reduce whose one
use, through copies and transposes that have no other use, is a
dynamic-slice along one dimension, where every device's offset (worked
out for every device of the assignment from the module's own arithmetic)
is its position in its reduce group times the block, becomes a
reduce-scatter along that dimension. The copies and transposes then carry
the block, and the dynamic-slice becomes a copy of it. Anything else is
left as it is.
"""

from __future__ import annotations

import re

import numpy as np

from jax_plugin.spmd.collective_modes import device_groups
from jax_plugin.spmd.hlo_text import ArrayShape, HloTextError, Instruction, parse_instruction, to_int

# Ops between the all-reduce and the slice that only move elements: the
# block's dimension is followed through them.
_PASSING = {"copy", "transpose"}

_DIMS = re.compile(r"\[([0-9,]*)\]")


class _NotFormed(Exception):
  """The pattern does not hold here: the all-reduce stays."""


def _ints(text: str | None) -> list[int]:
  if text is None:
    raise _NotFormed()
  body = text.strip().removeprefix("{").removesuffix("}").strip()
  return [to_int(v.strip()) for v in body.split(",") if v.strip()]


def _with_dims(shape_text: str, dims: tuple[int, ...]) -> str:
  """`shape_text` with other dimension sizes, its layout kept."""
  return _DIMS.sub("[" + ",".join(str(d) for d in dims) + "]", shape_text, count=1)


class _Offsets:
  """The values of integer scalar instructions for every device at once: an
  array whose first axis is the device (as [replica * partitions +
  partition]) or of size 1 for a value all devices share."""

  _BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "minimum": np.minimum,
             "maximum": np.maximum}

  def __init__(self, insts: dict[str, Instruction], replicas: int, partitions: int):
    self.insts = insts
    ids = np.arange(replicas * partitions, dtype=np.int64)
    self.partition = ids % partitions
    self.replica = ids // partitions
    self.memo: dict[str, np.ndarray] = {}

  def value(self, name: str) -> np.ndarray:
    if name not in self.memo:
      self.memo[name] = self._evaluate(name)
    return self.memo[name]

  def _evaluate(self, name: str) -> np.ndarray:
    inst = self.insts.get(name)
    if inst is None:
      raise _NotFormed()
    shape = inst.shape
    if not isinstance(shape, ArrayShape) or not re.fullmatch(r"[su](8|16|32|64)", shape.dtype):
      raise _NotFormed()
    op = inst.opcode
    if op == "partition-id":
      return self.partition
    if op == "replica-id":
      return self.replica
    if op == "constant":
      return self._literal(inst.operands[0] if inst.operands else "", shape)
    args = [self.value(o) for o in inst.operands]
    if op in ("copy", "convert", "reshape", "bitcast") and len(args) == 1:
      if int(np.prod(shape.dims)) != int(np.prod(args[0].shape[1:])):
        raise _NotFormed()
      return args[0].reshape((args[0].shape[0],) + shape.dims)
    if op in self._BINARY and len(args) == 2:
      return self._BINARY[op](args[0], args[1])
    if op == "dynamic-slice" and len(args) >= 2:
      return self._dynamic_slice(inst, args[0], args[1:], shape)
    raise _NotFormed()

  @staticmethod
  def _literal(text: str, shape: ArrayShape) -> np.ndarray:
    values = [to_int(v.strip()) for v in text.replace("{", " ").replace("}", " ").split(",") if v.strip()]
    if len(values) != int(np.prod(shape.dims)):
      raise _NotFormed()
    return np.asarray(values, dtype=np.int64).reshape((1,) + shape.dims)

  @staticmethod
  def _dynamic_slice(inst: Instruction, x: np.ndarray, starts: list[np.ndarray], shape: ArrayShape) -> np.ndarray:
    dims = x.shape[1:]
    sizes = tuple(_ints(inst.attr("dynamic_slice_sizes")))
    if len(starts) != len(dims) or len(sizes) != len(dims) or sizes != shape.dims or \
        any(s.shape[1:] != () for s in starts) or x.shape[0] != 1:
      raise _NotFormed()
    count = max(s.shape[0] for s in starts)
    at = np.stack([np.broadcast_to(s, (count,)) for s in starts], axis=1)
    # XLA clamps each start to [0, dim - size].
    at = np.clip(at, 0, np.asarray(dims) - np.asarray(sizes))
    found, which = np.unique(at, axis=0, return_inverse=True)
    blocks = np.stack([x[0][tuple(slice(a, a + z) for a, z in zip(row, sizes))] for row in found])
    return blocks[np.asarray(which).reshape(-1)]


def form(lines: list[str], assignment: np.ndarray) -> list[str]:
  """One computation's lines, with each all-reduce that only feeds one
  device's block of its result made a reduce-scatter (see above).
  assignment: [replicas, partitions] -> global device id."""
  insts = [parse_instruction(line) for line in lines]
  where = {inst.name: i for i, inst in enumerate(insts) if inst is not None}
  users: dict[str, list[int]] = {}
  for i, inst in enumerate(insts):
    if inst is None:
      continue
    for o in inst.operands:
      users.setdefault(o.split("#")[0], []).append(i)
    control = inst.attr("control-predecessors")
    for c in (control or "").strip("{}").split(","):
      if c.strip():
        users.setdefault(c.strip(), []).append(-1)  # a control edge: never a plain use
  by_name = {inst.name: inst for inst in insts if inst is not None}
  offsets = _Offsets(by_name, *assignment.shape)
  out = list(lines)
  for i, inst in enumerate(insts):
    if inst is None or inst.opcode != "all-reduce":
      continue
    try:
      replaced = _formed(inst, insts, where, users, offsets, assignment)
    except (_NotFormed, HloTextError):
      continue
    for j, line in replaced.items():
      out[j] = line
  return out


def _only_user(name: str, users: dict[str, list[int]], insts: list[Instruction | None]) -> Instruction:
  found = users.get(name, [])
  if len(found) != 1 or found[0] < 0:
    raise _NotFormed()
  user = insts[found[0]]
  if user.attr("control-predecessors") is not None or user.operands.count(name) != 1:
    raise _NotFormed()
  return user


def _formed(inst: Instruction, insts, where, users, offsets: _Offsets, assignment: np.ndarray) -> dict[int, str]:
  """The new lines, by index, for the all-reduce `inst` made a
  reduce-scatter; _NotFormed where the pattern does not hold."""
  shape = inst.shape
  if len(inst.operands) != 1 or not isinstance(shape, ArrayShape) or not shape.dims or inst.root or \
      inst.attr("control-predecessors") is not None:
    raise _NotFormed()
  # Follow the value through copies and transposes; axes[i] is the
  # all-reduce's dimension that dimension i of the current value is.
  chain: list[tuple[Instruction, list[int]]] = []  # each link, with its axes
  axes = list(range(len(shape.dims)))
  current = inst
  user = _only_user(inst.name, users, insts)
  while user.opcode in _PASSING:
    if user.opcode == "transpose":
      perm = _ints(user.attr("dimensions"))
      if sorted(perm) != list(range(len(axes))):
        raise _NotFormed()
      axes = [axes[p] for p in perm]
    chain.append((user, axes))
    current = user
    user = _only_user(user.name, users, insts)
  if user.opcode != "dynamic-slice" or user.operands[0] != current.name:
    raise _NotFormed()
  sliced = current.shape
  sizes = _ints(user.attr("dynamic_slice_sizes"))
  if not isinstance(sliced, ArrayShape) or len(sizes) != len(sliced.dims) or len(user.operands) != 1 + len(sizes):
    raise _NotFormed()
  cut = [d for d, (whole, size) in enumerate(zip(sliced.dims, sizes)) if whole != size]
  if len(cut) != 1:
    raise _NotFormed()
  d = cut[0]
  block = sizes[d]
  groups = device_groups(inst, assignment)
  size = len(groups[0])
  if block <= 0 or sliced.dims[d] != size * block:
    raise _NotFormed()
  # Every device's offset along d must be its position in its group times the block.
  position = {device: k for group in groups for k, device in enumerate(group)}
  flat = assignment.reshape(-1)
  if any(int(device) not in position for device in flat):
    raise _NotFormed()
  want = np.asarray([position[int(device)] * block for device in flat], dtype=np.int64)
  got = offsets.value(user.operands[1 + d]).reshape(-1)
  got = np.clip(got, 0, sliced.dims[d] - block)
  if got.shape[0] not in (1, want.shape[0]) or not np.array_equal(np.broadcast_to(got, want.shape), want):
    raise _NotFormed()
  axis = axes[d]
  scattered = list(shape.dims)
  scattered[axis] //= size
  lines: dict[int, str] = {}
  rs = parse_instruction(inst.line())
  rs.opcode = "reduce-scatter"
  rs.shape_text = _with_dims(inst.shape_text, tuple(scattered))
  rs.attrs = [a for a in rs.attrs if not a.startswith("dimensions=")] + [f"dimensions={{{axis}}}"]
  lines[where[inst.name]] = rs.line()
  for link, link_axes in chain:
    moved = parse_instruction(link.line())
    dims = list(link.shape.dims)
    dims[link_axes.index(axis)] //= size
    moved.shape_text = _with_dims(link.shape_text, tuple(dims))
    lines[where[link.name]] = moved.line()
  taken = parse_instruction(user.line())
  taken.opcode = "copy"
  taken.operands = [current.name]
  taken.attrs = [a for a in taken.attrs if not a.startswith("dynamic_slice_sizes=")]
  lines[where[user.name]] = taken.line()
  return lines


"""Replica groups in every form XLA's HLO printer writes, expanded to lists.

    {{0,1},{2,3}}                      explicit groups
    {}                                 one group of every participant
    [2,4]<=[4,2]T(1,0)                 iota: arange(8).reshape(4,2).transpose(1,0).reshape(2,4)
    mesh['x'=2,'y'=4] {'x'}            the devices of a 2x4 mesh, one group per
                                       position on the axes not named (here
                                       {0,4},{1,5},{2,6},{3,7}); the named axes
                                       vary inside a group in the order named
    mesh['a'=4,'b'=2], device_ids=(0,2,4,6,1,3,5,7) {'b'}
                                       a mesh whose devices are not in iota
                                       order (the ids, row-major over the mesh;
                                       also as an iota form)
    mesh['a'=8] {'a':(2)2}             a sub-axis: axis a split (major to minor)
                                       into [2, 2, 2]; groups run along the
                                       middle factor, of size 2 after 2 before
    mesh['a'=4] {}                     groups of one device
    maximal_mesh[device_id=3] {}       one group of one device

Mesh-axes forms follow XLA's MeshAxesReplicaGroupList (XLA:
xla/hlo/ir/replica_group.cc, mesh_and_axis.cc): the mesh's device ids are
reshaped to the axis sizes, each axis split into its sub-axes' factors, the
factors not named moved in front of the named ones, and the result read in
groups of the named factors' size. Names are printed quoted or bare.
"""

from __future__ import annotations

import re

import numpy as np

from jax_plugin.spmd.hlo_text import HloTextError, UnsupportedProgram, split_top_level, to_int

_IOTA = re.compile(r"^\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?$")
_MESH = re.compile(r"^mesh\[(.*?)\]\s*(?:,\s*device_ids=\((.*)\))?\s*\{(.*)\}$", re.S)
_MAXIMAL = re.compile(r"^maximal_mesh\[device_id=([0-9]+)\]\s*\{\s*\}$")
_NAME = r"(?:'([^']+)'|([A-Za-z_][\w.\-]*))"
_MESH_AXIS = re.compile(rf"^{_NAME}\s*=\s*([0-9]+)$")
_AXIS_REF = re.compile(rf"^{_NAME}(?::\(([0-9]+)\)([0-9]+))?$")


# More ids than any job has devices: a form that names more is refused before
# numpy is asked to build it (a mutated count could ask for terabytes).
MAX_IDS = 1 << 16


def _ints(text: str) -> list[int]:
  return [to_int(x) for x in text.split(",") if x.strip()]


def _count(sizes: list[int], whole: str) -> int:
  """The number of ids of an array of these sizes, refused past MAX_IDS or
  with a size of 0."""
  total = 1
  for n in sizes:
    if n == 0 or total * n > MAX_IDS:
      raise _unsupported(whole, f"sizes {sizes}: empty, or more than {MAX_IDS} ids")
    total *= n
  return total


def _unsupported(text: str, why: str) -> UnsupportedProgram:
  return UnsupportedProgram(f"replica_groups={text}: {why}")


def _iota(text: str, whole: str) -> np.ndarray | None:
  m = _IOTA.match(text)
  if not m:
    return None
  shape, reshape = _ints(m.group(1)), _ints(m.group(2))
  total = _count(reshape, whole)
  if _count(shape, whole) != total:
    raise _unsupported(whole, f"the iota list's shape {shape} does not hold the {total} ids of {reshape}")
  ids = np.arange(total).reshape(reshape)
  if m.group(3):
    perm = _ints(m.group(3))
    if sorted(perm) != list(range(len(reshape))):
      raise _unsupported(whole, f"T({m.group(3)}) is not a permutation of the {len(reshape)} reshape dimensions")
    ids = ids.transpose(perm)
  return ids.reshape(shape)


def _mesh(axes_text: str, ids_text: str | None, refs_text: str, whole: str) -> list[list[int]]:
  names, sizes = [], []
  for a in split_top_level(axes_text):
    am = _MESH_AXIS.match(a.strip())
    if not am:
      raise _unsupported(whole, f"cannot read the mesh axis {a!r}")
    names.append(am.group(1) or am.group(2))
    sizes.append(to_int(am.group(3)))
  if len(set(names)) != len(names):
    raise _unsupported(whole, f"the mesh names an axis twice: {names}")
  total = _count(sizes, whole)
  if ids_text is None:
    ids = np.arange(total)
  else:
    ids_text = ids_text.strip()
    if ids_text.startswith("devices="):
      ids_text = ids_text[len("devices="):]
    iota = _iota(ids_text, whole)
    if iota is not None:
      ids = iota.reshape(-1)
    else:
      # An explicit list, possibly after its dimensions: "[4,2]0,2,4,6,..."
      try:
        listed = _ints(re.sub(r"^\[[0-9,]*\]", "", ids_text))
      except ValueError:
        listed = []
      ids = np.array(listed if sorted(listed) == list(range(total)) else [], dtype=np.int64)
    if ids.size != total or sorted(ids.tolist()) != list(range(total)):
      raise _unsupported(whole, f"device_ids=({ids_text}) is not a permutation of the mesh's {total} devices")

  # Each mesh axis as its factors, major to minor: (size, index of the
  # reference that names it, or None).
  refs = []
  for r in split_top_level(refs_text):
    rm = _AXIS_REF.match(r.strip())
    if not rm or (rm.group(1) or rm.group(2)) not in names:
      raise _unsupported(whole, f"{r!r} is not an axis of the mesh {names}")
    axis = names.index(rm.group(1) or rm.group(2))
    sub = None if rm.group(3) is None else (to_int(rm.group(3)), to_int(rm.group(4)))
    if sub is not None and 0 in sub:
      raise _unsupported(whole, f"the sub-axis {r!r} has a size of 0")
    refs.append((axis, sub))
  factors: list[tuple[int, int | None]] = []
  for axis, size in enumerate(sizes):
    mine = [(i, sub) for i, (a, sub) in enumerate(refs) if a == axis]
    if not mine:
      factors.append((size, None))
      continue
    if any(sub is None for _, sub in mine):
      if len(mine) > 1:
        raise _unsupported(whole, f"axis {names[axis]!r} is named whole and again")
      factors.append((size, mine[0][0]))
      continue
    prefix = 1
    for i, (pre, sub_size) in sorted(mine, key=lambda m: m[1][0]):
      if pre % prefix or size % (pre * sub_size):
        raise _unsupported(whole, f"the sub-axes of {names[axis]!r} (size {size}) overlap or do not divide it")
      if pre != prefix:
        factors.append((pre // prefix, None))
      factors.append((sub_size, i))
      prefix = pre * sub_size
    if prefix != size:
      factors.append((size // prefix, None))
  others = [f for f, (_, ref) in enumerate(factors) if ref is None]
  inside = sorted((f for f, (_, ref) in enumerate(factors) if ref is not None), key=lambda f: factors[f][1])
  group_size = int(np.prod([factors[f][0] for f in inside])) if inside else 1
  grid = ids.reshape([s for s, _ in factors]).transpose(others + inside)
  return grid.reshape(-1, group_size).tolist()


def parse(text: str | None) -> list[list[int]] | None:
  """The groups, or None for "every participant in one group"."""
  if text is None:
    return None
  text = text.strip()
  if text in ("{}", ""):
    return None
  if text.startswith("{"):
    groups = []
    for g in split_top_level(text[1:-1]):
      if not (g.startswith("{") and g.endswith("}")):
        raise _unsupported(text, f"cannot read the group {g!r}")
      try:
        groups.append(_ints(g[1:-1]))
      except ValueError:
        raise _unsupported(text, f"cannot read the group {g!r}") from None
    return groups
  iota = _iota(text, text)
  if iota is not None:
    if iota.ndim != 2:
      raise _unsupported(text, "an iota list of groups has two dimensions (groups x group size)")
    return iota.tolist()
  m = _MESH.match(text)
  if m:
    return _mesh(m.group(1), m.group(2), m.group(3), text)
  m = _MAXIMAL.match(text)
  if m:
    return [[to_int(m.group(1))]]
  raise _unsupported(text, "a form of replica groups that myplugin does not know")


def parse_pairs(text: str | None) -> list[tuple[int, int]]:
  """source_target_pairs={{0,1},{1,2}}."""
  if text is None or text.strip() in ("{}", ""):
    return []
  pairs = []
  for p in split_top_level(text.strip()[1:-1]):
    try:
      ids = _ints(p.strip("{} "))
    except ValueError:
      ids = []
    if len(ids) != 2:
      raise UnsupportedProgram(f"source_target_pairs={text}: cannot read the pair {p!r}")
    pairs.append((ids[0], ids[1]))
  return pairs

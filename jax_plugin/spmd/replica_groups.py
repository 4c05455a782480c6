"""Replica groups in the three ways HLO text writes them, expanded to lists.

    {{0,1},{2,3}}                      explicit groups
    [2,4]<=[4,2]T(1,0)                 iota: arange(8).reshape(4,2).transpose(1,0).reshape(2,4)
    mesh['x'=2,'y'=4] {'x'}            the devices of a 2x4 mesh, one group per
                                       position on the axes not named (here
                                       {0,4},{1,5},{2,6},{3,7})
    {}                                 one group of every participant
"""

from __future__ import annotations

import re

import numpy as np

from jax_plugin.spmd.hlo_text import HloTextError, split_top_level

_IOTA = re.compile(r"^\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?$")
_MESH = re.compile(r"^mesh\[(.*)\]\s*\{(.*)\}$")
_MESH_AXIS = re.compile(r"^'([^']+)'=([0-9]+)$")


def _ints(text: str) -> list[int]:
  return [int(x) for x in text.split(",") if x.strip()]


def parse(text: str | None) -> list[list[int]] | None:
  """The groups, or None for "every participant in one group"."""
  if text is None:
    return None
  text = text.strip()
  if text in ("{}", ""):
    return None
  if text.startswith("{"):
    return [_ints(g.strip("{} ")) for g in split_top_level(text[1:-1])]
  m = _IOTA.match(text)
  if m:
    shape, reshape = _ints(m.group(1)), _ints(m.group(2))
    ids = np.arange(int(np.prod(reshape))).reshape(reshape)
    if m.group(3):
      ids = ids.transpose(_ints(m.group(3)))
    return ids.reshape(shape).tolist()
  m = _MESH.match(text)
  if m:
    axes, sizes = [], []
    for a in split_top_level(m.group(1)):
      am = _MESH_AXIS.match(a)
      if not am:
        raise HloTextError(f"unsupported mesh axis {a!r} in replica_groups={text}")
      axes.append(am.group(1))
      sizes.append(int(am.group(2)))
    grouped = [a.strip().strip("'") for a in split_top_level(m.group(2))]
    if any(g not in axes for g in grouped):
      raise HloTextError(f"replica_groups={text} names an axis the mesh does not have")
    others = [axes.index(a) for a in axes if a not in grouped]
    inside = [axes.index(a) for a in grouped]
    ids = np.arange(int(np.prod(sizes))).reshape(sizes).transpose(others + inside)
    group_size = int(np.prod([sizes[i] for i in inside])) if inside else 1
    return ids.reshape(-1, group_size).tolist()
  raise HloTextError(f"unsupported replica_groups={text}")


def parse_pairs(text: str | None) -> list[tuple[int, int]]:
  """source_target_pairs={{0,1},{1,2}}."""
  if text is None or text.strip() in ("{}", ""):
    return []
  pairs = []
  for p in split_top_level(text.strip()[1:-1]):
    ids = _ints(p.strip("{} "))
    if len(ids) != 2:
      raise HloTextError(f"unsupported source_target_pairs={text}")
    pairs.append((ids[0], ids[1]))
  return pairs

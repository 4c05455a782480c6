"""Which collectives of one computation become one call (a bucket), and the
order to write the computation in once they have.

XLA's combiners (all-reduce-combiner and its kin) make one collective of
several independent ones of a kind; the partitioned module that the
rewrite reads comes from before them, with one all-reduce per gradient.
This is the same idea on the instructions of a computation, in program
order:

- a collective joins the latest open bucket of its key (kind, reduction,
  device groups) while the bucket's bytes stay within the threshold, and
  only if it does not depend on the bucket, through any chain of values
  and other buckets: a bucket is one call, so anything it reads must be
  ready before all of its members;
- a loop, branch or call that communicates closes every bucket: the
  collectives before it run before it, and those after it after it (the
  rewrite's order fences).

The buckets then stand for single nodes of the computation's graph, and
`schedule` writes the instructions in a topological order of that graph
that keeps program order wherever it can. Every process reads the same
module and makes the same buckets, in the same order.
"""

from __future__ import annotations

import heapq
from typing import Callable, Hashable

from jax_plugin.spmd.hlo_text import HloTextError, Instruction


def _inputs(inst: Instruction) -> list[str]:
  """The instructions `inst` waits for: its operands (`%value#index` is an
  element of a tuple value) and its control predecessors."""
  names = [o.split("#")[0] for o in inst.operands]
  control = inst.attr("control-predecessors")
  if control:
    names += [c.strip() for c in control.strip("{}").split(",") if c.strip()]
  return names


def plan(insts: list[Instruction | None], combinable: Callable[[Instruction], tuple[Hashable, int] | None],
         closes: Callable[[Instruction], bool], threshold: int) -> list[list[int]]:
  """The buckets of more than one member, as indices into `insts` (None
  for a line that is no instruction), members in program order.

  combinable(inst): (key, bytes) for a collective that may share a call,
    else None.
  closes(inst): whether it ends every open bucket (a fence).
  threshold: the most bytes a bucket holds; 0 or less combines nothing.
  """
  if threshold <= 0:
    return []
  where = {inst.name: i for i, inst in enumerate(insts) if inst is not None}
  # For each instruction, the buckets its value depends on through values
  # alone (the nearest collectives; buckets' own dependences are `reads`).
  near: dict[int, frozenset[int]] = {}
  members: list[list[int]] = []
  sizes: list[int] = []
  reads: list[set[int]] = []  # bucket -> the buckets its members read
  open_buckets: dict[Hashable, int] = {}

  def behind(buckets: frozenset[int]) -> set[int]:
    """`buckets` and every bucket they depend on."""
    seen, todo = set(buckets), list(buckets)
    while todo:
      for b in reads[todo.pop()]:
        if b not in seen:
          seen.add(b)
          todo.append(b)
    return seen

  for i, inst in enumerate(insts):
    if inst is None:
      continue
    deps = frozenset()
    for name in _inputs(inst):
      j = where.get(name)
      if j is not None and j in near:
        deps |= near[j]
    if closes(inst):
      open_buckets.clear()
    found = combinable(inst)
    if found is None:
      near[i] = deps
      continue
    key, nbytes = found
    b = open_buckets.get(key)
    if b is None or sizes[b] + nbytes > threshold or b in behind(deps):
      b = len(members)
      members.append([])
      sizes.append(0)
      reads.append(set())
      open_buckets[key] = b
    members[b].append(i)
    sizes[b] += nbytes
    reads[b] |= deps
    near[i] = frozenset([b])
  return [m for m in members if len(m) > 1]


def schedule(insts: list[Instruction | None], buckets: list[list[int]]) -> list[int | list[int]]:
  """The computation's nodes in the order to write them: an index for an
  instruction (or other line) alone, a bucket's member list for a bucket.
  Program order wherever the graph allows it: a bucket stands where its
  last member stood, and what reads an earlier member moves after it."""
  node_of: dict[int, int] = {}  # instruction index -> node
  nodes: list[int | list[int]] = []
  bucket_node = {}
  for b, m in enumerate(buckets):
    for i in m:
      bucket_node[i] = b
  for i in range(len(insts)):
    if i in bucket_node:
      b = bucket_node[i]
      if i == buckets[b][0]:
        node_of_b = len(nodes)
        nodes.append(buckets[b])
        for j in buckets[b]:
          node_of[j] = node_of_b
    else:
      node_of[i] = len(nodes)
      nodes.append(i)
  where = {inst.name: i for i, inst in enumerate(insts) if inst is not None}
  waits = [0] * len(nodes)
  users: list[list[int]] = [[] for _ in nodes]
  for n, node in enumerate(nodes):
    needed = set()
    for i in node if isinstance(node, list) else [node]:
      inst = insts[i]
      for name in _inputs(inst) if inst is not None else []:
        j = where.get(name)
        if j is not None and node_of[j] != n:
          needed.add(node_of[j])
    waits[n] = len(needed)
    for d in needed:
      users[d].append(n)
  priority = [max(node) if isinstance(node, list) else node for node in nodes]
  ready = [(priority[n], n) for n in range(len(nodes)) if waits[n] == 0]
  heapq.heapify(ready)
  order = []
  while ready:
    _, n = heapq.heappop(ready)
    order.append(nodes[n])
    for u in users[n]:
      waits[u] -= 1
      if waits[u] == 0:
        heapq.heappush(ready, (priority[u], u))
  if len(order) != len(nodes):
    # plan() makes no cycle: the module had one (a mutated module's value that reads itself)
    raise HloTextError("a computation whose values depend on themselves")
  return order

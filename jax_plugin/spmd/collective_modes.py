"""Which global devices each group of a collective holds.

Replica-group semantics follow XLA's collective modes (XLA:
xla/service/collective_ops_utils.cc, GetCollectiveOpGroupMode): no channel
id means groups of replica ids; a channel id with use_global_device_ids
means flattened ids (replica * partitions + partition); a channel id alone
means replica groups across every partition, or for all-to-all and
collective-permute, groups of partition ids.
"""

from __future__ import annotations

import numpy as np

from jax_plugin.spmd import replica_groups as rg
from jax_plugin.spmd.hlo_text import Instruction, UnsupportedProgram


def device_groups(inst: Instruction, assignment: np.ndarray) -> list[list[int]]:
  """The global device ids of each of the collective `inst`'s groups;
  assignment: [replicas, partitions] -> global device id."""
  da = assignment
  replicas, partitions = da.shape
  groups = rg.parse(inst.attr("replica_groups"))
  has_channel = inst.attr("channel_id") is not None
  flattened = inst.attr("use_global_device_ids") == "true"
  if inst.opcode in ("all-to-all", "ragged-all-to-all") and has_channel:
    mode = "partition"
  elif not has_channel:
    mode = "replica"
  elif flattened:
    mode = "flattened"
  else:
    mode = "replica_and_partition"
  if groups is not None:
    bound = {"flattened": replicas * partitions, "partition": partitions}.get(mode, replicas)
    ids = [i for g in groups for i in g]
    if any(i < 0 or i >= bound for i in ids) or len(set(ids)) != len(ids):
      raise UnsupportedProgram(
          f"{inst.opcode} {inst.name}: replica_groups={inst.attr('replica_groups')} names an id outside "
          f"0..{bound - 1} (the {mode.replace('_and_partition', '')} ids of this program) or one id twice")
  out: list[list[int]] = []
  if mode == "flattened":
    for g in groups if groups is not None else [list(range(replicas * partitions))]:
      out.append([int(da[f // partitions, f % partitions]) for f in g])
  elif mode == "replica":
    for p in range(partitions):
      for g in groups if groups is not None else [list(range(replicas))]:
        out.append([int(da[r, p]) for r in g])
  elif mode == "partition":
    for r in range(replicas):
      for g in groups if groups is not None else [list(range(partitions))]:
        out.append([int(da[r, p]) for p in g])
  else:
    for g in groups if groups is not None else [list(range(replicas))]:
      out.append([int(da[r, p]) for r in g for p in range(partitions)])
  sizes = {len(g) for g in out}
  if len(sizes) != 1 or 0 in sizes:
    raise UnsupportedProgram(f"{inst.opcode} {inst.name} has replica groups that are empty or of different sizes")
  return out

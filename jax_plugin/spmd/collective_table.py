# Written by ci/gen_collective_table.py from _myplugin.collective_table();
# edit plugin/collectives/collective_table.h and rerun it, not this file.
"""The collectives' custom-call targets, as the C++ table that binds and
registers their handlers defines them: the names and attribute keys the
rewrite emits. Attribute types: str (a quoted string), i64 (`N : i64`),
i64[] (`dense<[...]> : tensor<Nxi64>`). Operands: any_number (one or more
data operands), one, none, ragged (a ragged all-to-all's six: the output
it updates, the data, input offsets, send sizes, the senders' (output
offset, size) pairs, recv sizes); every form with data also takes operands
after it that it does not read (they order the call). Results:
one_per_operand, one, aliased (the first operand, in place)."""
from __future__ import annotations

from typing import NamedTuple


class Attribute(NamedTuple):
  key: str
  type: str


class Target(NamedTuple):
  name: str
  replaces: str  # the HLO instruction the rewrite turns into this call; "" for none
  operands: str
  results: str
  attributes: tuple[Attribute, ...]
  engines: tuple[str, ...]  # the engines with a handler for it


REDUCTION = Attribute("reduction", "str")
REPLICA_GROUPS = Attribute("replica_groups", "i64[]")
GROUP_SIZE = Attribute("group_size", "i64")
FUNCTION = Attribute("function", "str")
DEVICE_GROUP = Attribute("device_group", "i64[]")
PAIRS = Attribute("pairs", "i64[]")
IDS = Attribute("ids", "i64[]")

ALL_REDUCE = Target("myplugin_all_reduce", "all-reduce", "any_number", "one_per_operand",
                    (REDUCTION, REPLICA_GROUPS, GROUP_SIZE, FUNCTION), ("cpu", "cuda"))
REDUCE_SCATTER = Target("myplugin_reduce_scatter", "reduce-scatter", "any_number", "one_per_operand",
                        (REDUCTION, REPLICA_GROUPS, GROUP_SIZE, FUNCTION), ("cpu", "cuda"))
ALL_GATHER = Target("myplugin_all_gather", "all-gather", "any_number", "one_per_operand",
                    (REPLICA_GROUPS, GROUP_SIZE, FUNCTION), ("cpu", "cuda"))
ALL_TO_ALL = Target("myplugin_all_to_all", "all-to-all", "one", "one",
                    (REPLICA_GROUPS, GROUP_SIZE, FUNCTION), ("cpu", "cuda"))
COLLECTIVE_PERMUTE = Target("myplugin_collective_permute", "collective-permute", "one", "one",
                            (DEVICE_GROUP, PAIRS, FUNCTION), ("cpu", "cuda"))
RAGGED_ALL_TO_ALL = Target("myplugin_ragged_all_to_all", "ragged-all-to-all", "ragged", "aliased",
                           (REPLICA_GROUPS, GROUP_SIZE, FUNCTION), ("cuda",))
PARTITION_ID = Target("myplugin_partition_id", "partition-id", "none", "one",
                      (IDS,), ("cpu", "cuda"))
REPLICA_ID = Target("myplugin_replica_id", "replica-id", "none", "one",
                    (IDS,), ("cpu", "cuda"))
ORDER_FENCE = Target("myplugin_order_fence", "", "one", "aliased",
                     (), ("cpu",))

TARGETS = (
    ALL_REDUCE,
    REDUCE_SCATTER,
    ALL_GATHER,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    RAGGED_ALL_TO_ALL,
    PARTITION_ID,
    REPLICA_ID,
    ORDER_FENCE,
)

# The names the reduction attribute takes.
REDUCTIONS = ("sum", "product", "min", "max", "and", "or")

// Typed XLA FFI handlers for the collectives in compiled programs. The
// attribute schema (what a rewritten program passes; see docs/architecture.md, "Collectives"):
//
//   all_reduce, reduce_scatter:  reduction (string), replica_groups (i64[]), group_size (i64)
//   all_gather, all_to_all:      replica_groups (i64[]), group_size (i64)
//   collective_permute:          device_group (i64[]), pairs (i64[], source/target ranks in the device group)
//   id (partition-id, replica-id): ids (i64[], the id of each global device)
//
// replica_groups lists global device ids, group after group, each of
// group_size; a device runs the collective with the group it is in.
// all_reduce, all_gather and reduce_scatter take one result per data
// operand: the rewrite combines independent collectives of one kind and
// group into one call (a bucket; combined_operands.h). Every collective
// takes operands after its data and does not read them: the multi-process
// rewrite passes the previous collective's result, which orders the calls
// (myplugin_order_fence does the same for loops).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace myplugin::collectives {

// (target name, XLA_FFI_Handler*) of every handler.
std::vector<std::pair<std::string, void*>> FfiHandlers();

}  // namespace myplugin::collectives

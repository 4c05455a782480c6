// What one device of a ragged all-to-all sends and receives (jax's
// lax.ragged_all_to_all, XLA's ragged-all-to-all), read from the call's
// offset and size arrays once they are on the host, and checked there, so
// that a slice outside its array, a size the sender and receiver disagree
// on, or two slices written over each other is an error that names the
// slice, never a transfer out of bounds or a result that depends on timing.
//
// The arrays hold K = group size × slices per peer entries. Slice i of the
// input (rows input_offsets[i] .. + send_sizes[i]) goes to the peer of rank
// i / (K / group size). What this device receives in slice i, from the
// peer of rank i / (K / group size), the sender's own arrays say: where it
// goes in this device's output and how many rows it is. The rewrite
// (jax_plugin/spmd/rewrite.py) delivers those with an all-to-all of each
// device's (output offset, send size) pairs before the call, as jax's
// documentation of ragged_all_to_all describes the receive side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace myplugin::collectives {

struct RaggedArrays {
  std::vector<int64_t> input_offsets;   // [K] rows of the input
  std::vector<int64_t> send_sizes;      // [K]
  std::vector<int64_t> sender_pairs;    // [K][2]: the sender's (output offset, send size) of each received slice
  std::vector<int64_t> recv_sizes;      // [K]
};

// One transfer with a peer, in elements of the data's type.
struct RaggedTransfer {
  int peer;       // rank in the device group
  size_t offset;  // into the input (a send) or the output (a receive)
  size_t count;
  bool operator==(const RaggedTransfer& o) const {
    return peer == o.peer && offset == o.offset && count == o.count;
  }
};

// Sends and receives in slice order; empty slices are left out on both
// sides alike (a sender's size is its receiver's, checked).
struct RaggedPlan {
  std::vector<RaggedTransfer> sends, recvs;
};

// `rank` of `group_size` devices; the input has `input_rows` rows and the
// output `output_rows`, of `row_elements` elements each. INVALID_ARGUMENT
// naming the slice and the values for arrays whose lengths disagree or do
// not divide by the group size, a negative offset or size, a slice outside
// its array, a received size other than the sender's, or received slices
// that overlap.
StatusOr<RaggedPlan> PlanRaggedAllToAll(const RaggedArrays& arrays, int rank, int group_size, int64_t input_rows,
                                        int64_t output_rows, size_t row_elements);

}  // namespace myplugin::collectives

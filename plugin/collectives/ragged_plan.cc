#include "collectives/ragged_plan.h"

#include <algorithm>
#include <string>
#include <utility>

namespace myplugin::collectives {

namespace {

// Rows [offset, offset + size), said without computing an end past int64.
std::string Rows(int64_t offset, int64_t size) {
  int64_t end = 0;
  const std::string last = __builtin_add_overflow(offset, size, &end)
                               ? std::to_string(offset) + " + " + std::to_string(size)
                               : std::to_string(end);
  return "rows [" + std::to_string(offset) + ", " + last + ")";
}

// Offset and size of a slice in an array of `rows` rows, checked; `what`
// names the slice in the error.
Status CheckSlice(int64_t offset, int64_t size, int64_t rows, const std::string& what) {
  if (offset < 0 || size < 0) {
    return InvalidArgument("ragged_all_to_all: " + what + " has offset " + std::to_string(offset) + " and size " +
                           std::to_string(size) + "; neither may be negative");
  }
  if (size > rows || offset > rows - size) {
    return InvalidArgument("ragged_all_to_all: " + what + " is " + Rows(offset, size) + " of an array of " +
                           std::to_string(rows) + " rows");
  }
  return OkStatus();
}

}  // namespace

StatusOr<RaggedPlan> PlanRaggedAllToAll(const RaggedArrays& a, int rank, int group_size, int64_t input_rows,
                                        int64_t output_rows, size_t row_elements) {
  const size_t k = a.input_offsets.size();
  if (group_size < 1 || rank < 0 || rank >= group_size) {
    return InvalidArgument("ragged_all_to_all: rank " + std::to_string(rank) + " of " + std::to_string(group_size));
  }
  if (a.send_sizes.size() != k || a.recv_sizes.size() != k || a.sender_pairs.size() != 2 * k) {
    return InvalidArgument("ragged_all_to_all: input_offsets has " + std::to_string(k) + " entries, send_sizes " +
                           std::to_string(a.send_sizes.size()) + ", recv_sizes " + std::to_string(a.recv_sizes.size()) +
                           "; they must be as many");
  }
  if (k == 0 || k % static_cast<size_t>(group_size) != 0) {
    return InvalidArgument("ragged_all_to_all: " + std::to_string(k) + " offsets and sizes over " +
                           std::to_string(group_size) + " devices: their number must be a positive multiple of the "
                           "devices");
  }
  const size_t per_peer = k / static_cast<size_t>(group_size);
  RaggedPlan plan;
  std::vector<std::pair<int64_t, int64_t>> written;  // received rows [begin, end), with the slice
  std::vector<size_t> written_slice;
  for (size_t i = 0; i < k; ++i) {
    const int peer = static_cast<int>(i / per_peer);
    const std::string slice = "slice " + std::to_string(i);
    MYPLUGIN_RETURN_IF_ERROR(CheckSlice(a.input_offsets[i], a.send_sizes[i], input_rows,
                                        slice + " sent to rank " + std::to_string(peer) + " (input_offsets, " +
                                            "send_sizes)"));
    const int64_t at = a.sender_pairs[2 * i], size = a.sender_pairs[2 * i + 1];
    if (size != a.recv_sizes[i]) {
      return InvalidArgument("ragged_all_to_all: rank " + std::to_string(peer) + " sends " + std::to_string(size) +
                             " rows in " + slice + " to rank " + std::to_string(rank) + ", whose recv_sizes says " +
                             std::to_string(a.recv_sizes[i]) + "; each device's send_sizes must be the all_to_all "
                             "of the recv_sizes");
    }
    MYPLUGIN_RETURN_IF_ERROR(CheckSlice(at, size, output_rows,
                                        slice + " received from rank " + std::to_string(peer) +
                                            " (its output_offsets, recv_sizes)"));
    if (a.send_sizes[i] > 0) {
      plan.sends.push_back({peer, static_cast<size_t>(a.input_offsets[i]) * row_elements,
                            static_cast<size_t>(a.send_sizes[i]) * row_elements});
    }
    if (size > 0) {
      plan.recvs.push_back({peer, static_cast<size_t>(at) * row_elements, static_cast<size_t>(size) * row_elements});
      written.push_back({at, at + size});
      written_slice.push_back(i);
    }
  }
  // Received slices land concurrently: two over one row would leave a
  // result that depends on which arrived last.
  std::vector<size_t> order(written.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return written[x] < written[y]; });
  for (size_t j = 1; j < order.size(); ++j) {
    const auto& before = written[order[j - 1]];
    const auto& next = written[order[j]];
    if (next.first < before.second) {
      return InvalidArgument("ragged_all_to_all: slices " + std::to_string(written_slice[order[j - 1]]) + " and " +
                             std::to_string(written_slice[order[j]]) + " received by rank " + std::to_string(rank) +
                             " both write output " + Rows(next.first, std::min(before.second, next.second) - next.first) +
                             " (output_offsets)");
    }
  }
  return plan;
}

}  // namespace myplugin::collectives

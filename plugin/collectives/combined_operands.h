// The operands of one combined collective (a bucket of the multi-process
// rewrite: several independent all-reduces, all-gathers or reduce-scatters
// made one call) laid out as one contiguous run per element type. Each run
// then costs one process-level collective, so a bucket pays one launch and
// one latency per element type instead of one per operand.
//
// The runs' layouts make the packed collective compute every operand's own:
//   all-reduce:     each run is its operands, one after the other;
//   all-gather:     the same; the gathered run holds, rank after rank, that
//                   rank's run, and each operand's result is its slice of
//                   every rank's block;
//   reduce-scatter: rank-major: block k of the run is block k of every
//                   operand, so the scattered block k is theirs, in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/signature.h"
#include "common/status.h"

namespace myplugin::collectives {

struct CombinedOperand {
  DataType type;
  size_t count;      // elements this device sends
  const void* send;
  void* recv;
};

// The types and counts of every operand, hashed: part of each run's
// signature, so processes that combined differently fail with a mismatch
// even when their runs happen to be the same size.
uint64_t HashOperands(const std::vector<CombinedOperand>& operands);

class CombinedOperands {
 public:
  struct Run {
    DataType type;
    std::vector<size_t> operands;  // indices into the operand list, in order
    size_t count = 0;              // elements each device sends in this run
    size_t send_offset = 0;        // bytes into the packed send buffer
    size_t recv_offset = 0;        // bytes into the packed receive buffer
  };

  // `group_size`: the devices of the group (reduce-scatter splits each
  // operand into that many blocks; all-gather receives that many runs).
  static StatusOr<CombinedOperands> Make(CollectiveOp op, std::vector<CombinedOperand> operands, int group_size);

  const std::vector<Run>& runs() const { return runs_; }
  size_t send_bytes() const { return send_bytes_; }
  size_t recv_bytes() const { return recv_bytes_; }
  uint64_t hash() const { return hash_; }

  void Pack(char* send) const;
  void Unpack(const char* recv) const;

 private:
  CollectiveOp op_ = CollectiveOp::kAllReduce;
  int group_size_ = 1;
  std::vector<CombinedOperand> operands_;
  std::vector<Run> runs_;
  size_t send_bytes_ = 0, recv_bytes_ = 0;
  uint64_t hash_ = 0;
};

}  // namespace myplugin::collectives

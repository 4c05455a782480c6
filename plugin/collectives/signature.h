// What a process says it is about to do in a collective. Every participant
// exchanges its signature before any data moves; if they differ, every
// participant fails with the same error naming who issued what, instead of
// hanging or reducing mismatched bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/dtype.h"

namespace myplugin::collectives {

enum class CollectiveOp : uint8_t {
  kAllReduce = 1, kAllGather, kReduceScatter, kAllToAll, kCollectivePermute, kBarrier,
  // The two sides of a transfer between two processes (transfer_endpoint.h).
  kSend, kReceive,
  // A ragged all-to-all (NCCL only: ragged_plan.h).
  kRaggedAllToAll,
};
const char* Name(CollectiveOp op);

struct Signature {
  CollectiveOp op = CollectiveOp::kBarrier;
  Reduction reduction = Reduction::kNone;
  DataType dtype = DataType::kU8;
  uint64_t count = 0;        // elements this process sends
  uint64_t group_hash = 0;   // the ordered participants, hashed
  uint64_t sequence = 0;     // per group, counts calls from 0
  uint64_t extra = 0;        // op-specific: the permute pairs, hashed

  static constexpr size_t kEncodedSize = 40;
  void Encode(char out[kEncodedSize]) const;
  static Signature Decode(const char in[kEncodedSize]);
  bool operator==(const Signature& o) const;
  // "all-reduce sum f32[1000] (call #5)"
  std::string Describe() const;
  // The same without the call's number: "all-reduce sum f32[1000]".
  std::string Operation() const;
};

// Empty when all agree; else the error text, naming each distinct signature
// and the processes (ranks mapped through `process_of_rank`) that issued it.
std::string CompareSignatures(const std::vector<Signature>& all, const std::vector<int>& process_of_rank);

uint64_t HashInts(const std::vector<int64_t>& values);

}  // namespace myplugin::collectives

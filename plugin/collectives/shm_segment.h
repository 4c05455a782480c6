// The shared-memory segment's layout, shared by shm_segment.cc, which makes and hands
// it over, and shm_communicator.cc, which steps in it: header, rank lines, slots.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "collectives/shm_communicator.h"

namespace myplugin::collectives {

constexpr uint64_t kMagic = 0x6d79706c75676e31;  // "myplugn1"
constexpr size_t kLine = 64;

inline size_t HeaderBytes(int ranks) { return (kLine * (2 + ranks) + 4095) / 4096 * 4096; }

// The segment: a header line, a line per rank, then two halves of one slot
// per rank. Each rank writes only its own line and slot (and, in an
// all-reduce, its own share of every slot after everyone wrote them).
struct ShmCommunicator::Segment {
  struct alignas(kLine) Header {
    uint64_t magic;
    uint64_t ranks;
    uint64_t slot_bytes;
    std::atomic<uint32_t> wake;      // bumped for sleepers; the futex word
    std::atomic<uint32_t> sleepers;  // waits that may be asleep on `wake`
  };
  struct alignas(kLine) Line {
    std::atomic<uint64_t> generation;  // the last step this rank reached
    std::atomic<uint64_t> value[2];    // what it published with its steps, by parity
  };
  Header header;
  Line line[1];  // one per rank (the segment is sized for them)
};

}  // namespace myplugin::collectives

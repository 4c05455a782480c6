// The same-host backend: the processes of a process group share one anonymous
// memory segment (memfd) and move collective data through it with plain
// loads and stores. The segment is made by rank 0 and handed to the others
// as a file descriptor over a Unix socket whose random name travels through
// the coordination key-value store, so it has no name in any file system and
// the kernel frees it when the last process of the process group exits, crash
// included. Every wait polls the call's deadline and the abort flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "coordination/client.h"

namespace myplugin::collectives {

class ShmCommunicator : public Communicator {
  friend class HierarchicalCommunicator;  // runs its steps without signatures

 public:
  // Maps the process group's segment: every rank of `process_group` (process ids, in rank
  // order, all on this host) must call this; it waits up to the arrival timeout.
  // `key_prefix` names this process group's keys in the key-value store.
  static StatusOr<std::unique_ptr<ShmCommunicator>> Create(
      std::vector<int> process_group, int my_process, WaitLimits limits,
      std::shared_ptr<coordination::CoordinationClient> coordination, const std::string& key_prefix);
  ~ShmCommunicator() override;

 protected:
  Status DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t tag) override;
  Status DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                     uint32_t tag) override;
  Status DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t tag) override;
  Status DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                    uint32_t tag) override;
  void DoAbort() override;
  // Rank `root`'s `bytes` at `data` land at `data` on every rank. The
  // signature check is the caller's (a hierarchical communicator's step).
  Status DoBroadcast(void* data, size_t bytes, int root);
  // Loads and stores beat a one-round-trip exchange at every size.
  size_t signed_bytes_limit() const override { return 0; }

 private:
  struct Segment;
  ShmCommunicator(std::vector<int> process_group, int rank, WaitLimits limits,
                  std::shared_ptr<coordination::CoordinationClient> coordination, Segment* segment,
                  size_t segment_bytes);
  // Waits until every rank has arrived at this rank's next step (a
  // generation counter per rank); publishes `value` with the step, readable
  // after it by value_of(rank) until the step after next.
  Status Step(uint64_t value = 0);
  uint64_t value_of(int rank) const;
  // Rank r's slot in `half`. Each write to the slots takes the next half
  // (phase_): a rank fills one while slower ranks still read the other, and
  // a step always separates a half's readers from its next writer.
  char* slot(int half, int rank) const;

  Segment* segment_;
  char* data_;
  const size_t segment_bytes_;
  const size_t slot_bytes_;
  // How long a wait spins before it sleeps (none when ranks outnumber cores).
  const std::chrono::microseconds spin_for_;
  uint64_t generation_ = 0;
  uint64_t phase_ = 0;
  std::atomic<bool> aborted_{false};
};

// The bytes of each rank's slot in each half of the segment.
size_t ShmSlotBytes(int ranks);

}  // namespace myplugin::collectives

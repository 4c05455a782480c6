// The CPU backend: Gloo over TCP, one rank per process. Gloo's rendezvous
// goes through our coordination key-value store.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "coordination/client.h"

namespace myplugin::collectives {

class AbortableGlooContext;

class GlooCommunicator : public Communicator {
 public:
  // Connects every rank of `process_group` (process ids, in rank order) to every
  // other. All of them must call this; it waits up to the arrival timeout.
  // `local_host` is the address peers reach this process at.
  static StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      std::vector<int> process_group, int my_process, WaitLimits limits, const std::string& local_host,
      std::shared_ptr<coordination::CoordinationClient> coordination, const std::string& key_prefix);
  ~GlooCommunicator() override;

 protected:
  Status DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t tag) override;
  Status DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                     uint32_t tag) override;
  Status DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t tag) override;
  // A ring: n - 1 steps, each passing one block to the next rank and adding
  // the one from the previous, (n - 1) / n of the array on the wire where
  // the all-reduce and a copy of the block moved twice that.
  Status DoReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                         uint32_t tag) override;
  Status DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                    uint32_t tag) override;
  Status DoSignedExchange(const char* record, size_t record_bytes, char* records, const void* payload, size_t bytes,
                          char* payloads, const std::function<Status(const char*)>& check, uint32_t tag,
                          bool copy_own = true) override;
  void DoAbort() override;

 private:
  // From this many processes on, every call exchanges its records in
  // ceil(log2 n) rounds (GatherRecords) instead of directly with every peer;
  // below it, the direct exchange's one round trip, which also carries a
  // mid-size call's data (signed_bytes_limit: up to 4 processes), is quicker.
  static constexpr int kLogExchangeFrom = 5;
  Status GatherRecords(const char* record, size_t record_bytes, char* records,
                       const std::function<Status(const char*)>& check, uint32_t tag);
  GlooCommunicator(std::vector<int> process_group, int rank, WaitLimits limits,
                   std::shared_ptr<coordination::CoordinationClient> coordination,
                   std::shared_ptr<AbortableGlooContext> context);
  std::shared_ptr<AbortableGlooContext> context_;
  std::vector<char> ring_blocks_;  // DoReduceScatter's two blocks, under the call lock
};

}  // namespace myplugin::collectives

// The backend for a process group that spans hosts: shared memory within
// each host (shm_communicator.h) and Gloo among one leader per host (its
// lowest rank). All-reduce reduces within the host, all-reduces among the
// leaders and broadcasts within the host; all-gather (and with it every
// signature exchange) gathers within the host, exchanges host blocks among
// the leaders and broadcasts. All-to-all and point-to-point exchanges go
// through a Gloo communicator over the whole process group, made on the
// first such call. The ranks of one host need not be contiguous.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/shm_communicator.h"
#include "coordination/client.h"

namespace myplugin::collectives {

class HierarchicalCommunicator : public Communicator {
 public:
  // Makes a Gloo communicator over `processes` (process ids in rank order)
  // with its rendezvous keys under `prefix`; every process of them calls it.
  using GlooFactory =
      std::function<StatusOr<std::unique_ptr<Communicator>>(const std::vector<int>& processes,
                                                            const std::string& prefix)>;

  // `host_of[r]` identifies rank r's host. Every rank of `process_group`
  // calls this; it connects its host's shared memory and, on a leader, the
  // leaders' Gloo communicator, each waiting up to the arrival timeout.
  static StatusOr<std::unique_ptr<HierarchicalCommunicator>> Create(
      std::vector<int> process_group, const std::vector<std::string>& host_of, int my_process, WaitLimits limits,
      std::shared_ptr<coordination::CoordinationClient> coordination, const std::string& key_prefix,
      GlooFactory gloo);

 protected:
  Status DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t tag) override;
  Status DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                     uint32_t tag) override;
  Status DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t tag) override;
  Status DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                    uint32_t tag) override;
  void DoAbort() override;
  // Every rank's data would cross the network once per other rank: the
  // composed all-reduce moves a host's data once.
  size_t signed_bytes_limit() const override { return 0; }

 private:
  HierarchicalCommunicator(std::vector<int> process_group, int rank, WaitLimits limits,
                           std::shared_ptr<coordination::CoordinationClient> coordination,
                           std::vector<std::vector<int>> hosts, int my_host,
                           std::unique_ptr<ShmCommunicator> host, std::unique_ptr<Communicator> leaders,
                           GlooFactory gloo, std::string key_prefix);
  bool leader() const { return leaders_ != nullptr; }
  // The whole process group's Gloo communicator, made on first use (every
  // rank reaches it in the same call: the signatures agreed).
  StatusOr<Communicator*> Whole();

  const std::vector<std::vector<int>> hosts_;  // each host's ranks, ascending; hosts by their lowest rank
  const int my_host_;
  const size_t widest_;  // the most ranks on one host
  std::unique_ptr<ShmCommunicator> host_;
  std::unique_ptr<Communicator> leaders_;  // on a leader of a job of several hosts only
  const GlooFactory gloo_;
  const std::string key_prefix_;
  std::vector<char> block_, all_;  // all-gather staging; calls are serialized
  std::mutex whole_mu_;
  std::unique_ptr<Communicator> whole_;  // under whole_mu_
  std::atomic<bool> aborted_{false};
};

}  // namespace myplugin::collectives

#include "collectives/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace myplugin::collectives {

StatusOr<std::unique_ptr<HierarchicalCommunicator>> HierarchicalCommunicator::Create(
    std::vector<int> process_group, const std::vector<std::string>& host_of, int my_process, WaitLimits limits,
    std::shared_ptr<coordination::CoordinationClient> coordination, const std::string& key_prefix,
    GlooFactory gloo) {
  const int n = static_cast<int>(process_group.size());
  if (host_of.size() != process_group.size()) {
    return InvalidArgument("a host for each of the processes " + IdList(process_group) + " is needed");
  }
  int rank = -1;
  for (int r = 0; r < n; ++r) {
    if (process_group[r] == my_process) rank = r;
  }
  if (rank < 0) {
    return InvalidArgument("process " + std::to_string(my_process) + " is not in the process group " +
                           IdList(process_group));
  }
  // Hosts in the order of their lowest rank: every rank derives the same list.
  std::vector<std::vector<int>> hosts;
  std::map<std::string, size_t> index;
  for (int r = 0; r < n; ++r) {
    auto [it, added] = index.emplace(host_of[r], hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  const int my_host = static_cast<int>(index[host_of[rank]]);
  std::vector<int> local;
  for (int r : hosts[my_host]) local.push_back(process_group[r]);
  StatusOr<std::unique_ptr<ShmCommunicator>> host = ShmCommunicator::Create(
      local, my_process, limits, coordination, key_prefix + "host" + std::to_string(my_host) + "/");
  if (!host.ok()) return host.status();
  std::unique_ptr<Communicator> leaders;
  if (hosts.size() > 1 && hosts[my_host][0] == rank) {
    std::vector<int> heads;
    for (const auto& h : hosts) heads.push_back(process_group[h[0]]);
    StatusOr<std::unique_ptr<Communicator>> made = gloo(heads, key_prefix + "leaders/");
    if (!made.ok()) return made.status();
    leaders = made.take();
  }
  return std::unique_ptr<HierarchicalCommunicator>(new HierarchicalCommunicator(
      std::move(process_group), rank, limits, std::move(coordination), std::move(hosts), my_host, host.take(),
      std::move(leaders), std::move(gloo), key_prefix));
}

HierarchicalCommunicator::HierarchicalCommunicator(std::vector<int> process_group, int rank, WaitLimits limits,
                                                   std::shared_ptr<coordination::CoordinationClient> coordination,
                                                   std::vector<std::vector<int>> hosts, int my_host,
                                                   std::unique_ptr<ShmCommunicator> host,
                                                   std::unique_ptr<Communicator> leaders, GlooFactory gloo,
                                                   std::string key_prefix)
    : Communicator(std::move(process_group), rank, limits, std::move(coordination)),
      hosts_(std::move(hosts)),
      my_host_(my_host),
      widest_(std::max_element(hosts_.begin(), hosts_.end(),
                               [](const auto& a, const auto& b) { return a.size() < b.size(); })->size()),
      host_(std::move(host)),
      leaders_(std::move(leaders)),
      gloo_(std::move(gloo)),
      key_prefix_(std::move(key_prefix)) {
  // They move this one's data: their waits follow its calls' phases.
  ShareClock(*host_);
  if (leaders_) ShareClock(*leaders_);
}

Status HierarchicalCommunicator::DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t tag) {
  const size_t local = hosts_[my_host_].size();
  // Host blocks are padded to the widest host: the leaders' exchange takes
  // equal records.
  const size_t block = widest_ * bytes;
  block_.resize(block);
  all_.resize(block * hosts_.size());
  MYPLUGIN_RETURN_IF_ERROR(host_->DoAllGatherBytes(send, block_.data(), bytes, tag));
  if (leader()) {
    MYPLUGIN_RETURN_IF_ERROR(leaders_->DoAllGatherBytes(block_.data(), all_.data(), block, tag));
  } else if (hosts_.size() == 1) {
    std::memcpy(all_.data(), block_.data(), local * bytes);
  }
  if (hosts_.size() > 1) MYPLUGIN_RETURN_IF_ERROR(host_->DoBroadcast(all_.data(), all_.size(), 0));
  char* out = static_cast<char*>(recv);
  for (size_t h = 0; h < hosts_.size(); ++h) {
    for (size_t i = 0; i < hosts_[h].size(); ++i) {
      std::memcpy(out + hosts_[h][i] * bytes, all_.data() + h * block + i * bytes, bytes);
    }
  }
  return OkStatus();
}

Status HierarchicalCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DataType type,
                                             ReduceFunction fn, uint32_t tag) {
  MYPLUGIN_RETURN_IF_ERROR(host_->DoAllReduce(send, recv, count, type, fn, tag));
  if (hosts_.size() == 1) return OkStatus();
  if (leader()) MYPLUGIN_RETURN_IF_ERROR(leaders_->DoAllReduce(recv, recv, count, type, fn, tag));
  // The leader's result, not each rank's own reduction: identical bits everywhere.
  return host_->DoBroadcast(recv, count * ByteSize(type), 0);
}

StatusOr<Communicator*> HierarchicalCommunicator::Whole() {
  std::lock_guard<std::mutex> lock(whole_mu_);
  if (!whole_) {
    StatusOr<std::unique_ptr<Communicator>> made = gloo_(process_group(), key_prefix_ + "whole/");
    if (!made.ok()) return made.status();
    whole_ = made.take();
    ShareClock(*whole_);
    // An abort that came while it connected must reach it too.
    if (aborted_.load()) whole_->DoAbort();
  }
  if (aborted_.load()) return Status(Code::kAborted, "the call was aborted");
  return whole_.get();
}

Status HierarchicalCommunicator::DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t tag) {
  StatusOr<Communicator*> whole = Whole();
  if (!whole.ok()) return whole.status();
  return whole.value()->DoAllToAllBytes(send, recv, bytes_per_rank, tag);
}

Status HierarchicalCommunicator::DoExchange(const std::vector<PeerBuffer>& sends,
                                            const std::vector<PeerBuffer>& recvs, uint32_t tag) {
  StatusOr<Communicator*> whole = Whole();
  if (!whole.ok()) return whole.status();
  return whole.value()->DoExchange(sends, recvs, tag);
}

void HierarchicalCommunicator::DoAbort() {
  aborted_.store(true);
  host_->DoAbort();
  if (leaders_) leaders_->DoAbort();
  // A call in flight may hold whole_mu_ while it connects: it checks the
  // flag once connected.
  std::unique_lock<std::mutex> lock(whole_mu_, std::try_to_lock);
  if (lock.owns_lock() && whole_) whole_->DoAbort();
}

}  // namespace myplugin::collectives

#include "collectives/device_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "collectives/communicator_cache.h"
#include "collectives/process_runtime.h"
#include "collectives/signature.h"

namespace myplugin::collectives {

DeviceCollectives::DeviceCollectives(std::vector<int> device_group, int my_process, int devices_per_process)
    : device_group_(std::move(device_group)), my_process_(my_process), devices_per_process_(std::max(devices_per_process, 1)) {
  for (int r = 0; r < size(); ++r) {
    int p = ProcessOf(device_group_[r]);
    auto it = std::find(processes_.begin(), processes_.end(), p);
    if (it == processes_.end()) {
      processes_.push_back(p);
      ranks_of_process_.emplace_back();
      it = processes_.end() - 1;
    }
    ranks_of_process_[it - processes_.begin()].push_back(r);
    if (p == my_process_) local_ranks_.push_back(r);
  }
}

int DeviceCollectives::ProcessRank(int process) const {
  return static_cast<int>(std::find(processes_.begin(), processes_.end(), process) - processes_.begin());
}

Status DeviceCollectives::Check(const DeviceBuffers& b) const {
  if (local_ranks_.empty()) return InvalidArgument("this process has no device in the device group");
  if (b.send.size() != local_ranks_.size() || b.recv.size() != local_ranks_.size()) {
    return InvalidArgument("expected " + std::to_string(local_ranks_.size()) + " local buffers for device group " +
                           IdList(device_group_) + ", got " + std::to_string(b.send.size()));
  }
  for (const auto& ranks : ranks_of_process_) {
    if (ranks.size() != local_ranks_.size()) {
      return Unimplemented("device group " + IdList(device_group_) +
                           " has different numbers of devices in different processes");
    }
  }
  return OkStatus();
}

namespace {

// One communicator per device group: device groups over the same processes (the
// columns of a mesh, say) run concurrently from different device threads,
// and each needs its own ordered stream of calls.
StatusOr<std::shared_ptr<Communicator>> ProcessCommunicator(const std::vector<int>& processes,
                                                            const std::vector<int>& devices) {
  return ProcessRuntime::Get().communicators().ForProcessGroup(processes, devices);
}

}  // namespace

Status DeviceCollectives::Agree(CollectiveOp op, Reduction reduction, DataType type, size_t count, uint64_t extra) {
  if (processes_.size() <= 1) return OkStatus();
  StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
  if (!comm.ok()) return comm.status();
  return comm.value()->Agree(op, reduction, type, count, extra);
}

Status DeviceCollectives::AllReduce(const DeviceBuffers& b, size_t count, DataType type, Reduction reduction,
                                    uint64_t extra) {
  MYPLUGIN_RETURN_IF_ERROR(Check(b));
  StatusOr<ReduceFunction> fn = ReduceFunctionFor(type, reduction);
  if (!fn.ok()) return fn.status();
  const size_t bytes = count * ByteSize(type);
  if (b.send.size() == 1 && processes_.size() > 1) {  // one device here: nothing to combine first
    StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
    if (!comm.ok()) return comm.status();
    return comm.value()->AllReduce(b.send[0], b.recv[0], count, type, reduction, extra);
  }
  // Combine the local devices into the first output, in device group order.
  void* acc = b.recv[0];
  if (bytes) std::memmove(acc, b.send[0], bytes);
  for (size_t i = 1; i < b.send.size(); ++i) {
    if (bytes) fn.value()(acc, acc, b.send[i], count);
  }
  if (processes_.size() > 1) {
    StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
    if (!comm.ok()) return comm.status();
    MYPLUGIN_RETURN_IF_ERROR(comm.value()->AllReduce(acc, acc, count, type, reduction, extra));
  }
  for (size_t i = 1; i < b.recv.size(); ++i) {
    if (bytes) std::memcpy(b.recv[i], acc, bytes);
  }
  return OkStatus();
}

Status DeviceCollectives::AllGather(const DeviceBuffers& b, size_t count, DataType type, uint64_t extra) {
  MYPLUGIN_RETURN_IF_ERROR(Check(b));
  const size_t bytes = count * ByteSize(type);
  const size_t local = local_ranks_.size();
  // Each process's block: its devices' inputs in device group order.
  std::vector<char> block(local * bytes), all(processes_.size() * local * bytes);
  for (size_t i = 0; i < local; ++i) {
    if (bytes) std::memcpy(block.data() + i * bytes, b.send[i], bytes);
  }
  if (processes_.size() > 1) {
    StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
    if (!comm.ok()) return comm.status();
    MYPLUGIN_RETURN_IF_ERROR(comm.value()->AllGather(block.data(), all.data(), local * count, type, extra));
  } else {
    all.swap(block);
  }
  // Reorder into device group rank order.
  std::vector<char> ordered(size() * bytes);
  for (size_t p = 0; p < processes_.size(); ++p) {
    for (size_t i = 0; i < local; ++i) {
      int rank = ranks_of_process_[p][i];
      if (bytes) std::memcpy(ordered.data() + rank * bytes, all.data() + (p * local + i) * bytes, bytes);
    }
  }
  for (void* out : b.recv) {
    if (!ordered.empty()) std::memcpy(out, ordered.data(), ordered.size());
  }
  return OkStatus();
}

Status DeviceCollectives::ReduceScatter(const DeviceBuffers& b, size_t count, DataType type, Reduction reduction,
                                        uint64_t extra) {
  MYPLUGIN_RETURN_IF_ERROR(Check(b));
  if (count % size() != 0) {
    return InvalidArgument("reduce-scatter of " + std::to_string(count) + " elements over " +
                           std::to_string(size()) + " devices: the count must divide evenly");
  }
  const size_t bytes = count * ByteSize(type), block = bytes / size();
  if (b.send.size() == 1 && processes_.size() > 1 && processes_.size() == static_cast<size_t>(size())) {
    // One device in each process: device rank r is process rank r, so the
    // processes' reduce-scatter (a ring over Gloo) is the devices'.
    StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
    if (!comm.ok()) return comm.status();
    return comm.value()->ReduceScatter(b.send[0], b.recv[0], count, type, reduction, extra);
  }
  std::vector<std::unique_ptr<char[]>> full;  // not zeroed: the all-reduce writes all of it
  for (size_t i = 0; i < b.send.size(); ++i) full.emplace_back(new char[bytes]);
  DeviceBuffers whole;
  whole.send = b.send;
  for (auto& f : full) whole.recv.push_back(f.get());
  MYPLUGIN_RETURN_IF_ERROR(AllReduce(whole, count, type, reduction, extra));
  for (size_t i = 0; i < b.recv.size(); ++i) {
    if (block) std::memcpy(b.recv[i], full[i].get() + local_ranks_[i] * block, block);
  }
  return OkStatus();
}

Status DeviceCollectives::AllToAll(const DeviceBuffers& b, size_t count, DataType type) {
  MYPLUGIN_RETURN_IF_ERROR(Check(b));
  if (count % size() != 0) {
    return InvalidArgument("all-to-all of " + std::to_string(count) + " elements over " + std::to_string(size()) +
                           " devices: the count must divide evenly");
  }
  const size_t blk = count / size() * ByteSize(type);
  const size_t local = local_ranks_.size(), np = processes_.size();
  // To process q: for each local source (device group order), for each of q's
  // devices (device group order), the block that device gets.
  const size_t slot = local * local * blk;
  std::vector<char> out(np * slot), in(np * slot);
  for (size_t q = 0; q < np; ++q) {
    for (size_t s = 0; s < local; ++s) {
      for (size_t d = 0; d < local; ++d) {
        int dst_rank = ranks_of_process_[q][d];
        if (blk) {
          std::memcpy(out.data() + q * slot + (s * local + d) * blk,
                      static_cast<const char*>(b.send[s]) + dst_rank * blk, blk);
        }
      }
    }
  }
  if (np > 1) {
    StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
    if (!comm.ok()) return comm.status();
    MYPLUGIN_RETURN_IF_ERROR(comm.value()->AllToAll(out.data(), in.data(), np * slot / ByteSize(type), type));
  } else {
    in.swap(out);
  }
  // From process p: for each of its sources s, for each local destination d.
  for (size_t p = 0; p < np; ++p) {
    for (size_t s = 0; s < local; ++s) {
      int src_rank = ranks_of_process_[p][s];
      for (size_t d = 0; d < local; ++d) {
        if (blk) {
          std::memcpy(static_cast<char*>(b.recv[d]) + src_rank * blk, in.data() + p * slot + (s * local + d) * blk,
                      blk);
        }
      }
    }
  }
  return OkStatus();
}

Status DeviceCollectives::CollectivePermute(const DeviceBuffers& b, size_t count, DataType type,
                                            const std::vector<std::pair<int, int>>& pairs) {
  MYPLUGIN_RETURN_IF_ERROR(Check(b));
  const size_t bytes = count * ByteSize(type);
  std::vector<int> source_of(size(), -1);
  std::vector<int64_t> flat;
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || dst < 0 || src >= size() || dst >= size()) {
      return InvalidArgument("collective-permute pair (" + std::to_string(src) + ", " + std::to_string(dst) +
                             ") is outside the " + std::to_string(size()) + " participants");
    }
    if (source_of[dst] != -1) return InvalidArgument("collective-permute: a device may receive only once");
    source_of[dst] = src;
    flat.push_back(src);
    flat.push_back(dst);
  }
  auto local_index = [&](int rank) {
    return static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), rank) - local_ranks_.begin());
  };
  // Pack what goes to each other process in pair order; unpack likewise.
  const size_t np = processes_.size();
  std::vector<std::vector<char>> to(np), from(np);
  for (const auto& [src, dst] : pairs) {
    int ps = ProcessRank(ProcessOf(device_group_[src])), pd = ProcessRank(ProcessOf(device_group_[dst]));
    if (ProcessOf(device_group_[src]) == my_process_ && pd != ProcessRank(my_process_)) {
      const char* p = static_cast<const char*>(b.send[local_index(src)]);
      to[pd].insert(to[pd].end(), p, p + bytes);
    }
    if (ProcessOf(device_group_[dst]) == my_process_ && ps != ProcessRank(my_process_)) from[ps].resize(from[ps].size() + bytes);
  }
  if (np > 1) {
    std::vector<Communicator::PeerBuffer> sends, recvs;
    for (size_t q = 0; q < np; ++q) {
      if (!to[q].empty()) sends.push_back({static_cast<int>(q), to[q].data(), to[q].size()});
      if (!from[q].empty()) recvs.push_back({static_cast<int>(q), from[q].data(), from[q].size()});
    }
    StatusOr<std::shared_ptr<Communicator>> comm = ProcessCommunicator(processes_, device_group_);
    if (!comm.ok()) return comm.status();
    MYPLUGIN_RETURN_IF_ERROR(comm.value()->Exchange(sends, recvs, type, count, HashInts(flat)));
  }
  // Local copies first need the sources intact: outputs may alias nothing,
  // but copy local-to-local from the send buffers directly.
  std::vector<size_t> offset(np, 0);
  for (const auto& [src, dst] : pairs) {
    if (ProcessOf(device_group_[dst]) != my_process_) continue;
    void* out = b.recv[local_index(dst)];
    int ps = ProcessRank(ProcessOf(device_group_[src]));
    if (ProcessOf(device_group_[src]) == my_process_) {
      if (bytes) std::memcpy(out, b.send[local_index(src)], bytes);
    } else {
      if (bytes) std::memcpy(out, from[ps].data() + offset[ps], bytes);
      offset[ps] += bytes;
    }
  }
  for (size_t i = 0; i < local_ranks_.size(); ++i) {
    if (source_of[local_ranks_[i]] == -1 && bytes) std::memset(b.recv[i], 0, bytes);
  }
  return OkStatus();
}

}  // namespace myplugin::collectives

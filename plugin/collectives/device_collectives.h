// Collectives over devices. A device group is an ordered list of global device
// ids (one replica group); the devices of one process combine through
// memory first, and the processes then run one process-level collective
// (communicator.h) on the combined data, so the wire carries one rank per
// process. A device group inside one process never touches the network.
//
// The calls take every local device's buffer at once (in device group order):
// the Python entry point has them all; the FFI handlers, which run one
// thread per device, gather them first (local_rendezvous.h).
#pragma once

#include <utility>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/signature.h"
#include "common/status.h"

namespace myplugin::collectives {

struct DeviceBuffers {
  std::vector<const void*> send;  // one per local device of the group, in group order
  std::vector<void*> recv;
};

class DeviceCollectives {
 public:
  // `devices_per_process`: global device d lives in process d / devices_per_process.
  DeviceCollectives(std::vector<int> device_group, int my_process, int devices_per_process);

  const std::vector<int>& device_group() const { return device_group_; }
  // Positions (ranks) in the device group of this process's devices, ascending.
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  int size() const { return static_cast<int>(device_group_.size()); }

  // count: elements each device sends. Outputs: all-reduce count; all-gather
  // size*count; reduce-scatter count/size; all-to-all count; permute count.
  // `extra`: see Communicator::AllReduce.
  Status AllReduce(const DeviceBuffers& b, size_t count, DataType type, Reduction reduction, uint64_t extra = 0);
  Status AllGather(const DeviceBuffers& b, size_t count, DataType type, uint64_t extra = 0);
  Status ReduceScatter(const DeviceBuffers& b, size_t count, DataType type, Reduction reduction,
                       uint64_t extra = 0);
  Status AllToAll(const DeviceBuffers& b, size_t count, DataType type);
  // pairs: (source rank, target rank) in the device group; a rank with no source gets zeros.
  Status CollectivePermute(const DeviceBuffers& b, size_t count, DataType type,
                           const std::vector<std::pair<int, int>>& pairs);
  // The processes of the device group agree that they issue this call (whose data
  // moves elsewhere), or fail with a mismatch, a timeout or an abort.
  Status Agree(CollectiveOp op, Reduction reduction, DataType type, size_t count, uint64_t extra = 0);

 private:
  Status Check(const DeviceBuffers& b) const;
  int ProcessOf(int device) const { return device / devices_per_process_; }
  // Position of `process` in the process group.
  int ProcessRank(int process) const;

  std::vector<int> device_group_;
  int my_process_;
  int devices_per_process_;
  std::vector<int> local_ranks_;
  std::vector<int> processes_;          // distinct processes, in order of first appearance
  std::vector<std::vector<int>> ranks_of_process_;  // per process rank: its device ranks, ascending
};

}  // namespace myplugin::collectives

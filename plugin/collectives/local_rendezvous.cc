#include "collectives/local_rendezvous.h"

#include "collectives/communicator.h"
#include "common/deadline.h"

#include <chrono>

namespace myplugin::collectives {

Status LocalRendezvous::Join(const std::vector<int>& device_group, int slot, int local_count, const void* send,
                             void* recv, const std::function<Status(const DeviceBuffers&)>& op, double timeout_s) {
  if (local_count == 1) {
    DeviceBuffers b{{send}, {recv}};
    return op(b);
  }
  auto deadline = After(timeout_s);
  std::unique_lock<std::mutex> lock(mu_);
  Group& g = groups_[device_group];
  // A device that comes back for the next call waits until the previous
  // one has let every participant go.
  if (!cv_.wait_until(lock, deadline, [&] { return !g.done; })) {
    return Status(Code::kDeadlineExceeded, "local devices did not leave the previous collective");
  }
  if (g.arrived == 0) {
    g.buffers.send.assign(local_count, nullptr);
    g.buffers.recv.assign(local_count, nullptr);
    g.present.assign(local_count, false);
  }
  if (slot < 0 || slot >= local_count || g.present[slot]) {
    return Internal("device slot " + std::to_string(slot) + " joined a collective twice");
  }
  g.buffers.send[slot] = send;
  g.buffers.recv[slot] = recv;
  g.present[slot] = true;
  if (++g.arrived == local_count) {
    DeviceBuffers buffers = g.buffers;
    lock.unlock();
    Status st = op(buffers);  // outside the lock: it may take long
    lock.lock();
    g.status = st;
    g.done = true;
    cv_.notify_all();
  } else if (!cv_.wait_until(lock, deadline, [&] { return g.done || g.arrived == local_count; })) {
    std::vector<int> missing;
    for (int s = 0; s < local_count; ++s) {
      if (!g.present[s]) missing.push_back(s);
    }
    return Status(Code::kDeadlineExceeded, "the collective on devices " + IdList(device_group) +
                                               " timed out waiting for local device slots " +
                                               IdList(missing) + " of this process");
  }
  // Every local device came: the last one runs the collective, whose own
  // waits are bounded and whose timeout names the processes that never came
  // (a deadline here would race it with a vaguer error).
  cv_.wait(lock, [&] { return g.done; });
  Status st = g.status;
  if (++g.departed == local_count) {
    // Reset in place, never erase: a device may already wait here for the
    // next call, holding a reference to this group.
    g.arrived = 0;
    g.departed = 0;
    g.done = false;
    g.status = OkStatus();
    cv_.notify_all();
  }
  return st;
}

}  // namespace myplugin::collectives

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
  if (closed_) {
    return Status(Code::kAborted, "the collective on devices " + IdList(device_group) + " was not started: " +
                                      closed_why_);
  }
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
  } else if (!cv_.wait_until(lock, deadline,
                              [&] { return g.done || g.arrived == local_count || closed_; }) ||
             (closed_ && !g.done && g.arrived < local_count)) {
    std::vector<int> missing;
    for (int s = 0; s < local_count; ++s) {
      if (!g.present[s]) missing.push_back(s);
    }
    const bool closed = closed_;
    Withdraw(g, slot);
    if (closed) {
      return Status(Code::kAborted, "the collective on devices " + IdList(device_group) +
                                        " was cut short waiting for local device slots " + IdList(missing) +
                                        " of this process: " + closed_why_);
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

void LocalRendezvous::Withdraw(Group& g, int slot) {
  g.present[slot] = false;
  g.buffers.send[slot] = nullptr;
  g.buffers.recv[slot] = nullptr;
  --g.arrived;
}

std::string LocalRendezvous::Waiting(const std::vector<int>& device_group, const Group& g, int local_count) {
  std::vector<int> came, missing;
  for (int s = 0; s < local_count; ++s) (g.present[s] ? came : missing).push_back(s);
  return "the collective on devices " + IdList(device_group) + ": local device slots " + IdList(came) +
         " waited for slots " + IdList(missing);
}

std::vector<std::string> LocalRendezvous::Close(const std::string& why) {
  std::vector<std::string> cut;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    closed_why_ = why;
    for (const auto& [device_group, g] : groups_) {
      if (!g.done && g.arrived > 0) cut.push_back(Waiting(device_group, g, static_cast<int>(g.present.size())));
    }
  }
  cv_.notify_all();
  return cut;
}

int LocalRendezvous::Arrived(const std::vector<int>& device_group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = groups_.find(device_group);
  return it == groups_.end() ? 0 : it->second.arrived;
}

void LocalRendezvous::Reopen() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = false;
  closed_why_.clear();
}

}  // namespace myplugin::collectives

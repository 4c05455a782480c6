#include "collectives/nccl_watchdog.h"

#include <chrono>
#include <vector>

namespace myplugin::collectives {

NcclWatchdog::NcclWatchdog(double poll_s) : poll_s_(poll_s) {}

NcclWatchdog::~NcclWatchdog() { Stop(); }

void NcclWatchdog::Watch(const void* key, std::function<void()> poll) {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    watched_[key] = std::move(poll);
    stop_ = false;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void NcclWatchdog::Unwatch(const void* key) {
  std::unique_lock<std::mutex> lock(mu_);
  watched_.erase(key);
  cv_.wait(lock, [&] { return polling_ != key; });
}

void NcclWatchdog::Stop() {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool NcclWatchdog::running() {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  return thread_.joinable();
}

void NcclWatchdog::Loop() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(poll_s_));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // One round: each communicator watched as it began, unless it was
    // unwatched meanwhile. A poll runs without the lock (it may wait for
    // an error's cause), marked as `polling_` so that Unwatch waits for it.
    std::vector<const void*> keys;
    for (const auto& [key, poll] : watched_) keys.push_back(key);
    for (const void* key : keys) {
      if (stop_) break;
      auto it = watched_.find(key);
      if (it == watched_.end()) continue;
      std::function<void()> poll = it->second;
      polling_ = key;
      lock.unlock();
      poll();
      lock.lock();
      polling_ = nullptr;
      cv_.notify_all();
    }
    cv_.wait_for(lock, period, [&] { return stop_; });
  }
}

}  // namespace myplugin::collectives

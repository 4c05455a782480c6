#include "collectives/nccl_watchdog.h"

#include <chrono>
#include <vector>

namespace myplugin::collectives {

NcclWatchdog::NcclWatchdog(double poll_s) : poll_s_(poll_s) {}

NcclWatchdog::~NcclWatchdog() { Stop(); }

void NcclWatchdog::Watch(const void* key, Poll poll) {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    watched_[key] = std::move(poll);
    stop_ = false;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void NcclWatchdog::Unwatch(const void* key) {
  std::thread handler;
  {
    std::unique_lock<std::mutex> lock(mu_);
    watched_.erase(key);
    cv_.wait(lock, [&] { return polling_ != key && !handling_.count(key); });
    auto it = handlers_.find(key);
    if (it != handlers_.end()) {
      handler = std::move(it->second);
      handlers_.erase(it);
    }
  }
  if (handler.joinable()) handler.join();  // done: it only returns
}

void NcclWatchdog::Stop() {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::unique_lock<std::mutex> lock(mu_);
  Reap(lock, /*all=*/true);
}

void NcclWatchdog::Reap(std::unique_lock<std::mutex>& lock, bool all) {
  if (all) cv_.wait(lock, [&] { return handling_.empty(); });
  for (auto it = handlers_.begin(); it != handlers_.end();) {
    if (handling_.count(it->first)) {
      ++it;
      continue;
    }
    // Done: it no longer needs the lock, only to return.
    it->second.join();
    it = handlers_.erase(it);
  }
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
    Reap(lock, /*all=*/false);
    std::vector<const void*> keys;
    for (const auto& [key, poll] : watched_) keys.push_back(key);
    for (const void* key : keys) {
      if (stop_) break;
      auto it = watched_.find(key);
      if (it == watched_.end() || handling_.count(key) || handlers_.count(key)) continue;
      Poll poll = it->second;
      polling_ = key;
      lock.unlock();
      std::function<void()> found = poll();
      lock.lock();
      polling_ = nullptr;
      if (found) {
        handling_.insert(key);
        handlers_[key] = std::thread([this, key, found = std::move(found)] {
          found();
          std::lock_guard<std::mutex> done(mu_);
          handling_.erase(key);
          cv_.notify_all();
        });
      }
      cv_.notify_all();
    }
    cv_.wait_for(lock, period, [&] { return stop_; });
  }
}

}  // namespace myplugin::collectives

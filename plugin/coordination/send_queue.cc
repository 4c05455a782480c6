#include "coordination/send_queue.h"

namespace myplugin::coordination {

bool SendQueue::Push(std::shared_ptr<const std::string> frame) {
  bool fits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return !overflowed_;
    fits = bytes_ + frame->size() <= max_bytes_;
    if (!fits) {
      overflowed_ = true;
      closed_ = true;
      frames_.clear();
    } else {
      bytes_ += frame->size();
      frames_.push_back(std::move(frame));
    }
  }
  cv_.notify_all();
  return fits;
}

std::shared_ptr<const std::string> SendQueue::Pop() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return closed_ || !frames_.empty(); });
  if (closed_) return nullptr;
  auto f = std::move(frames_.front());
  frames_.pop_front();
  return f;
}

std::shared_ptr<const std::string> SendQueue::TryPop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || frames_.empty()) return nullptr;
  auto f = std::move(frames_.front());
  frames_.pop_front();
  return f;
}

void SendQueue::Sent(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ -= bytes < bytes_ ? bytes : bytes_;
}

void SendQueue::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    frames_.clear();
    bytes_ = 0;
  }
  cv_.notify_all();
}

bool SendQueue::overflowed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overflowed_;
}

size_t SendQueue::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace myplugin::coordination

#include "collectives/agreement_gate.h"

#include <chrono>
#include <utility>

namespace myplugin::collectives {

AgreementGate::AgreementGate(uint32_t* word, std::function<void(const Status&)> on_failure)
    : word_(word), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { Loop(); });
}

AgreementGate::~AgreementGate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status AgreementGate::Enqueue(const std::function<Status()>& enqueue,
                              const std::function<Status(uint32_t number)>& close, std::function<Status()> agree) {
  std::lock_guard<std::mutex> lock(mu_);
  // Under mu_ from the enqueue to the queueing: the calls' numbers, their
  // waits on the stream and their agreements are in one order.
  if (!failure_.ok()) return failure_;
  MYPLUGIN_RETURN_IF_ERROR(enqueue());
  const uint32_t number = next_ + 1;
  MYPLUGIN_RETURN_IF_ERROR(close(number));
  next_ = number;
  queue_.push_back({std::move(agree), number, nullptr, nullptr});
  cv_.notify_all();
  return OkStatus();
}

Status AgreementGate::AgreeNow(std::function<Status()> agree) {
  Status result;
  bool done = false;
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_.ok()) return failure_;
  queue_.push_back({std::move(agree), std::nullopt, &result, &done});
  cv_.notify_all();
  cv_.wait(lock, [&] { return done; });
  return result;
}

bool AgreementGate::Drain(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return queue_.empty() && !running_; });
}

Status AgreementGate::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

uint32_t AgreementGate::opened() { return __atomic_load_n(word_, __ATOMIC_ACQUIRE); }

void AgreementGate::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, with nothing left to run
    Job job = std::move(queue_.front());
    queue_.pop_front();
    if (!failure_.ok()) {
      // After a failed gated call nothing more is agreed: its peers have
      // left the calls after it, and this process is ending.
      if (job.done != nullptr) {
        *job.result = failure_;
        *job.done = true;
        cv_.notify_all();
      }
      continue;
    }
    running_ = true;
    lock.unlock();
    Status agreed = job.agree();  // bounded: the agreement's own deadline
    lock.lock();
    running_ = false;
    if (job.done != nullptr) {
      *job.result = agreed;
      *job.done = true;
    } else if (agreed.ok()) {
      // A release store: the GPU reads the word over the bus; nothing it
      // guards is written by this thread, so ordering with it is all.
      __atomic_store_n(word_, *job.number, __ATOMIC_RELEASE);
    } else {
      failure_ = agreed;
      lock.unlock();
      on_failure_(agreed);  // may take seconds (aborts, the failure report)
      lock.lock();
    }
    cv_.notify_all();
  }
}

}  // namespace myplugin::collectives

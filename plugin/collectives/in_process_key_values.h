// The key-value store of a job of one process (no coordination service),
// where NCCL's device groups exchange their unique ids; owned by the
// process's runtime.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "common/deadline.h"
#include "common/status.h"

namespace myplugin::collectives {

class InProcessKeyValues {
 public:
  Status Set(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return OkStatus();
  }

  // The value of `key`, waiting up to `timeout_s` for another thread to set it.
  StatusOr<std::string> Get(const std::string& key, double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    bool found = cv_.wait_for(lock, Millis(timeout_s), [&] { return values_.count(key) > 0; });
    if (!found) return Status(Code::kDeadlineExceeded, "no value for '" + key + "'");
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace myplugin::collectives

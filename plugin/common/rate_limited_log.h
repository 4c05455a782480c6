// A log line that a peer can make repeat at its own pace (rejected
// connections, accept errors): at most `per_second` lines a second get
// through; the others are counted, and the next line says how many.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/log.h"

namespace myplugin {

class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::string prefix, int per_second = 5)
      : prefix_(std::move(prefix)), per_second_(per_second) {}

  void Log(const std::string& line) {
    std::string out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto now = std::chrono::steady_clock::now();
      if (now - window_start_ >= std::chrono::seconds(1)) {
        window_start_ = now;
        in_window_ = 0;
      }
      if (in_window_ >= per_second_) {
        ++suppressed_;
        return;
      }
      ++in_window_;
      out = prefix_ + line;
      if (suppressed_ > 0) {
        out += " (" + std::to_string(suppressed_) + " similar lines suppressed)";
        suppressed_ = 0;
      }
    }
    LogLine(out);
  }

 private:
  std::mutex mu_;
  const std::string prefix_;
  const int per_second_;
  std::chrono::steady_clock::time_point window_start_{};
  int in_window_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace myplugin

// Durations in seconds (from users, environment variables and peers) as
// times the clocks can hold. Negative and NaN mean none; anything beyond a
// century saturates there, so a huge timeout means "wait", never an
// overflow that expires at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace myplugin {

inline constexpr double kMaxWaitSeconds = 100.0 * 365 * 24 * 3600;

inline double SaturatedSeconds(double seconds) {
  if (!(seconds > 0)) return 0;
  return seconds < kMaxWaitSeconds ? seconds : kMaxWaitSeconds;
}

inline std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(SaturatedSeconds(seconds) * 1000));
}

inline std::chrono::steady_clock::time_point After(double seconds) {
  return std::chrono::steady_clock::now() + Millis(seconds);
}

// A duration for messages: "0.25 s", "300 s".
inline std::string SecondsText(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", seconds);
  return buf;
}

}  // namespace myplugin

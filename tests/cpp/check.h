// The few lines of test harness the C++ unit tests share.
#pragma once

#include <cstdio>

namespace unit {
inline int passes = 0;
inline int failures = 0;
}  // namespace unit

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (cond) {                                                                      \
      ++unit::passes;                                                                \
    } else {                                                                         \
      ++unit::failures;                                                              \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                                \
  } while (0)

// The spans that myplugin shows in a jax.profiler trace: its collectives
// (waiting for peers, moving data), barriers, cross-host transfers, compile
// steps and program launches. Code on those paths opens a Span; while no
// profile is being taken that costs one relaxed atomic load and nothing
// else. While one is (the PJRT profiler extension started a session), each
// span ends as a record in a process-wide buffer, with the thread that ran
// it, which the extension turns into an XPlane when jax collects the trace.
//
// Times are CLOCK_MONOTONIC nanoseconds (as the flight recorder's), turned
// into wall-clock times only when a profile is written.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace myplugin::profile {

// A named value on a span (an XStat).
struct Stat {
  enum class Kind : uint8_t { kInt, kUint, kDouble, kText };
  std::string name;
  Kind kind = Kind::kInt;
  int64_t int_value = 0;
  uint64_t uint_value = 0;
  double double_value = 0;
  std::string text;

  static Stat Int(std::string name, int64_t v);
  static Stat Uint(std::string name, uint64_t v);
  static Stat Double(std::string name, double v);
  static Stat Text(std::string name, std::string v);
};

struct SpanRecord {
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t thread = 0;  // the Linux thread id that ran it, or a line of its own
  std::string line;    // that line's name, where `thread` is no thread
  std::vector<Stat> stats;
};

// What a session collected: its spans in the order they ended, the names of
// their threads, and how many spans the buffer had no room for.
struct Collected {
  std::vector<SpanRecord> spans;
  std::map<int64_t, std::string> thread_names;
  uint64_t dropped = 0;
};

namespace internal {
extern std::atomic<int> active_sessions;
}

// Whether a profile is being taken.
inline bool Active() { return internal::active_sessions.load(std::memory_order_relaxed) > 0; }

int64_t MonotonicNowNanos();
int64_t CurrentThread();

// Keeps `span` (thread 0: the caller's) while a profile is being taken.
void Record(SpanRecord span);

// A span from its construction to its destruction on this thread; inert
// (no clock read, no allocation) when no profile is active at construction.
class Span {
 public:
  explicit Span(const char* name) {
    if (Active()) Begin(name);
  }
  ~Span() {
    if (on_) End();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool on() const { return on_; }
  // Stats are kept only for a span that is on: check on() before building
  // costly ones.
  void Add(Stat stat) {
    if (on_) record_.stats.push_back(std::move(stat));
  }

 private:
  void Begin(const char* name);
  void End();
  bool on_ = false;
  SpanRecord record_;
};

// Sessions (the profiler extension's start and stop). Spans are recorded
// while at least one session is open; a session collects those that began
// after it started.
int64_t StartSession();  // the session's start, for StopSession
Collected StopSession(int64_t started_ns);

// The most spans kept for the sessions open at once; more are counted as dropped.
inline constexpr size_t kMaxSpans = size_t{1} << 20;

}  // namespace myplugin::profile

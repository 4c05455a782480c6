#include "common/profile_spans.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <mutex>

namespace myplugin::profile {

namespace internal {
std::atomic<int> active_sessions{0};
}

namespace {

// The buffer of the sessions open now: emptied when the first opens and
// when the last closes, so memory is held only while a profile is taken.
struct Buffer {
  std::mutex mu;
  std::vector<SpanRecord> spans;
  std::map<int64_t, std::string> thread_names;
  uint64_t dropped = 0;
};

Buffer& TheBuffer() {
  static Buffer* buffer = new Buffer;  // never destroyed: threads may record while the process exits
  return *buffer;
}

// The calling thread's line: its name, and its id, since threads often
// share a name (an engine's threads inherit the Python thread's).
std::string ThreadLine(int64_t tid) {
  char name[32] = {};
  const bool named = pthread_getname_np(pthread_self(), name, sizeof(name)) == 0 && name[0] != '\0';
  return (named ? std::string(name) + " " : std::string()) + "(thread " + std::to_string(tid) + ")";
}

}  // namespace

Stat Stat::Int(std::string name, int64_t v) {
  Stat s;
  s.name = std::move(name);
  s.kind = Kind::kInt;
  s.int_value = v;
  return s;
}

Stat Stat::Uint(std::string name, uint64_t v) {
  Stat s;
  s.name = std::move(name);
  s.kind = Kind::kUint;
  s.uint_value = v;
  return s;
}

Stat Stat::Double(std::string name, double v) {
  Stat s;
  s.name = std::move(name);
  s.kind = Kind::kDouble;
  s.double_value = v;
  return s;
}

Stat Stat::Text(std::string name, std::string v) {
  Stat s;
  s.name = std::move(name);
  s.kind = Kind::kText;
  s.text = std::move(v);
  return s;
}

int64_t MonotonicNowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t CurrentThread() {
  thread_local const int64_t tid = static_cast<int64_t>(syscall(SYS_gettid));
  return tid;
}

void Record(SpanRecord span) {
  if (!Active()) return;
  if (span.thread == 0) span.thread = CurrentThread();
  // Named before the lock: pthread_getname_np may read /proc.
  Buffer& b = TheBuffer();
  bool named;
  {
    std::lock_guard<std::mutex> lock(b.mu);
    named = b.thread_names.count(span.thread) > 0;
  }
  std::string name = named                            ? ""
                     : !span.line.empty()             ? span.line
                     : span.thread == CurrentThread() ? ThreadLine(span.thread)
                                                      : "";
  std::lock_guard<std::mutex> lock(b.mu);
  if (internal::active_sessions.load(std::memory_order_relaxed) == 0) return;  // the last session closed meanwhile
  if (b.spans.size() >= kMaxSpans) {
    ++b.dropped;
    return;
  }
  if (!named && !name.empty()) b.thread_names.emplace(span.thread, std::move(name));
  b.spans.push_back(std::move(span));
}

void Span::Begin(const char* name) {
  on_ = true;
  record_.name = name;
  record_.start_ns = MonotonicNowNanos();
}

void Span::End() {
  record_.end_ns = MonotonicNowNanos();
  Record(std::move(record_));
}

int64_t StartSession() {
  Buffer& b = TheBuffer();
  std::lock_guard<std::mutex> lock(b.mu);
  if (internal::active_sessions.load(std::memory_order_relaxed) == 0) {
    b.spans.clear();
    b.thread_names.clear();
    b.dropped = 0;
  }
  internal::active_sessions.fetch_add(1, std::memory_order_relaxed);
  return MonotonicNowNanos();
}

Collected StopSession(int64_t started_ns) {
  Buffer& b = TheBuffer();
  std::lock_guard<std::mutex> lock(b.mu);
  Collected out;
  for (const SpanRecord& s : b.spans) {
    if (s.start_ns < started_ns) continue;
    if (out.thread_names.count(s.thread) == 0) {
      auto name = b.thread_names.find(s.thread);
      if (name != b.thread_names.end()) out.thread_names.emplace(name->first, name->second);
    }
    out.spans.push_back(s);
  }
  out.dropped = b.dropped;
  if (internal::active_sessions.fetch_sub(1, std::memory_order_relaxed) == 1) {
    std::vector<SpanRecord>().swap(b.spans);
    b.thread_names.clear();
    b.dropped = 0;
  }
  return out;
}

}  // namespace myplugin::profile

// One file (~375 lines) for one object: the recorder's lock-free ring, the
// JSON dump that reads it, and the scopes that annotate its records share the
// slot layout, which no other file should see.
#include "collectives/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "collectives/process_runtime.h"
#include "collectives/profiled_calls.h"
#include "collectives/straggler_watch.h"
#include "common/exit_guard.h"
#include "common/profile_spans.h"

namespace myplugin::collectives {
namespace {

constexpr size_t kNameWords = CallRecord::kNameBytes / 8;

thread_local const char* current_function = nullptr;

// Text into a slot's words, up to kNameBytes - 1 bytes and zero-filled
// after (the reader relies on the terminating zero).
void StoreText(std::atomic<uint64_t>* words, const char* text) {
  bool ended = text == nullptr;
  for (size_t w = 0; w < kNameWords; ++w) {
    char bytes[8] = {};
    for (size_t b = 0; b < 8 && !ended && w * 8 + b < CallRecord::kNameBytes - 1; ++b) {
      bytes[b] = text[w * 8 + b];
      ended = bytes[b] == '\0';
    }
    uint64_t word;
    std::memcpy(&word, bytes, 8);
    words[w].store(word, std::memory_order_relaxed);
  }
}

void LoadText(const std::atomic<uint64_t>* words, char* out) {
  for (size_t w = 0; w < kNameWords; ++w) {
    uint64_t word = words[w].load(std::memory_order_relaxed);
    std::memcpy(out + w * 8, &word, 8);
  }
  out[CallRecord::kNameBytes - 1] = '\0';
}

std::string Text(const char* field) { return std::string(field, strnlen(field, CallRecord::kNameBytes)); }

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonSeconds(int64_t monotonic_ns, int64_t offset_ns) {
  if (monotonic_ns == 0) return "null";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.6f", static_cast<double>(monotonic_ns + offset_ns) / 1e9);
  return buf;
}

}  // namespace

// Every field is a relaxed atomic, and `version` a seqlock: odd (2 * id - 1)
// while a writer of call `id` holds the slot, 2 * id once it holds that call.
// A writer takes the slot by compare-and-swap, so two writers never fill it
// at once: the ring can wrap while a writer is preempted mid-record (on a
// loaded machine), and the slow writer's stores would otherwise mix
// into the newer call's record after that one was published. A reader (the
// watchdog, a dump) checks `version` around its copy.
struct FlightRecorder::Slot {
  std::atomic<uint64_t> version{0};
  std::atomic<uint64_t> sig_words[5] = {};  // op/reduction/dtype, count, process group hash, sequence, extra
  std::atomic<uint8_t> state{0};
  std::atomic<int32_t> num_processes{0};
  std::atomic<int32_t> processes[CallRecord::kListedProcesses] = {};
  std::atomic<uint64_t> name[kNameWords] = {};
  std::atomic<uint64_t> function[kNameWords] = {};
  std::atomic<int64_t> start_ns{0}, match_ns{0}, end_ns{0};
};

const char* Name(CallState state) {
  switch (state) {
    case CallState::kIssued: return "issued";
    case CallState::kMatched: return "matched";
    case CallState::kDone: return "done";
    case CallState::kFailed: return "failed";
  }
  return "?";
}

std::vector<int> CallRecord::Processes() const {
  return std::vector<int>(processes, processes + std::min(num_processes, kListedProcesses));
}

std::string CallRecord::Describe() const {
  std::string list = "[";
  for (int i = 0; i < std::min(num_processes, kListedProcesses); ++i) {
    list += (i ? ", " : "") + std::to_string(processes[i]);
  }
  if (num_processes > kListedProcesses) list += ", … (" + std::to_string(num_processes) + " in all)";
  list += "]";
  if (name[0] != '\0') {
    // A barrier of every process lists none; its first use is not numbered.
    return "barrier '" + Text(name) + "'" +
           (signature.sequence > 0 ? " (use #" + std::to_string(signature.sequence) + ")" : "") +
           (num_processes > 0 ? " of processes " + list : "");
  }
  return signature.Describe() + " on processes " + list + (function[0] != '\0' ? " in " + Text(function) : "");
}

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t WallMinusMonotonicNanos() {
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  return static_cast<int64_t>(wall.tv_sec) * 1000000000 + wall.tv_nsec - MonotonicNanos();
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)), slots_(new Slot[capacity_]) {}

FlightRecorder::~FlightRecorder() = default;

uint64_t FlightRecorder::Begin(const Signature& sig, const std::vector<int>& processes, const char* name,
                               const char* function) {
  const uint64_t id = next_.fetch_add(1, std::memory_order_relaxed) + 1;
  Slot& s = slots_[id % capacity_];
  if (!Claim(s, id)) return id;  // a newer call has the slot: this one wrapped out before it was written
  s.sig_words[0].store(static_cast<uint64_t>(sig.op) | static_cast<uint64_t>(sig.reduction) << 8 |
                           static_cast<uint64_t>(sig.dtype) << 16,
                       std::memory_order_relaxed);
  s.sig_words[1].store(sig.count, std::memory_order_relaxed);
  s.sig_words[2].store(sig.group_hash, std::memory_order_relaxed);
  s.sig_words[3].store(sig.sequence, std::memory_order_relaxed);
  s.sig_words[4].store(sig.extra, std::memory_order_relaxed);
  const size_t n = processes.size();
  s.num_processes.store(static_cast<int32_t>(n), std::memory_order_relaxed);
  for (size_t i = 0; i < n && i < CallRecord::kListedProcesses; ++i) {
    s.processes[i].store(processes[i], std::memory_order_relaxed);
  }
  StoreText(s.name, name);
  StoreText(s.function, function);
  s.start_ns.store(MonotonicNanos(), std::memory_order_relaxed);
  s.match_ns.store(0, std::memory_order_relaxed);
  s.end_ns.store(0, std::memory_order_relaxed);
  s.state.store(static_cast<uint8_t>(CallState::kIssued), std::memory_order_relaxed);
  s.version.store(2 * id, std::memory_order_release);
  return id;
}

void FlightRecorder::Matched(uint64_t id) {
  if (id == 0) return;  // never recorded
  Slot& s = slots_[id % capacity_];
  if (!Reclaim(s, id)) return;  // overwritten: the ring wrapped
  s.match_ns.store(MonotonicNanos(), std::memory_order_relaxed);
  s.state.store(static_cast<uint8_t>(CallState::kMatched), std::memory_order_relaxed);
  s.version.store(2 * id, std::memory_order_release);
}

void FlightRecorder::End(uint64_t id, bool ok) {
  if (id == 0) return;
  Slot& s = slots_[id % capacity_];
  if (!Reclaim(s, id)) return;
  s.end_ns.store(MonotonicNanos(), std::memory_order_relaxed);
  s.state.store(static_cast<uint8_t>(ok ? CallState::kDone : CallState::kFailed), std::memory_order_relaxed);
  s.version.store(2 * id, std::memory_order_release);
  if (profile::Active()) {
    if (std::optional<CallRecord> call = Read(id)) ProfileCall(*call);
  }
}

namespace {

bool InFlight(uint8_t state) {
  return state == static_cast<uint8_t>(CallState::kIssued) || state == static_cast<uint8_t>(CallState::kMatched);
}

}  // namespace

bool FlightRecorder::Claim(Slot& s, uint64_t id) {
  uint64_t v = s.version.load(std::memory_order_relaxed);
  while (true) {
    if (v >= 2 * id) return false;
    if (v % 2 == 1) {  // another writer holds the slot: it is writing a few words
      std::this_thread::yield();
      v = s.version.load(std::memory_order_relaxed);
      continue;
    }
    if (s.version.compare_exchange_weak(v, 2 * id - 1, std::memory_order_acquire, std::memory_order_relaxed)) break;
  }
  std::atomic_thread_fence(std::memory_order_release);  // the odd version is seen before any field changes
  return true;
}

bool FlightRecorder::Reclaim(Slot& s, uint64_t id) {
  uint64_t v = 2 * id;
  // Another thread's Matched or End of the same call may hold it: wait.
  while (!s.version.compare_exchange_weak(v, 2 * id - 1, std::memory_order_acquire, std::memory_order_relaxed)) {
    if (v != 2 * id && v != 2 * id - 1) return false;
    if (v == 2 * id - 1) std::this_thread::yield();
    v = 2 * id;
  }
  std::atomic_thread_fence(std::memory_order_release);
  return true;
}

std::optional<CallRecord> FlightRecorder::Read(uint64_t id) const {
  // A writer of this very call holds the slot for a few stores: wait for it.
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t v = slots_[id % capacity_].version.load(std::memory_order_acquire);
    if (v != 2 * id) {
      if (v != 2 * id - 1) return std::nullopt;
      std::this_thread::yield();
      continue;
    }
    if (std::optional<CallRecord> r = Copy(id)) return r;
  }
  return std::nullopt;
}

std::optional<CallRecord> FlightRecorder::Copy(uint64_t id) const {
  const Slot& s = slots_[id % capacity_];
  CallRecord r;
  r.id = id;
  const uint64_t w0 = s.sig_words[0].load(std::memory_order_relaxed);
  r.signature.op = static_cast<CollectiveOp>(w0 & 0xff);
  r.signature.reduction = static_cast<Reduction>((w0 >> 8) & 0xff);
  r.signature.dtype = static_cast<DataType>((w0 >> 16) & 0xff);
  r.signature.count = s.sig_words[1].load(std::memory_order_relaxed);
  r.signature.group_hash = s.sig_words[2].load(std::memory_order_relaxed);
  r.signature.sequence = s.sig_words[3].load(std::memory_order_relaxed);
  r.signature.extra = s.sig_words[4].load(std::memory_order_relaxed);
  r.state = static_cast<CallState>(s.state.load(std::memory_order_acquire));
  r.num_processes = s.num_processes.load(std::memory_order_relaxed);
  for (int i = 0; i < std::min(r.num_processes, CallRecord::kListedProcesses); ++i) {
    r.processes[i] = s.processes[i].load(std::memory_order_relaxed);
  }
  LoadText(s.name, r.name);
  LoadText(s.function, r.function);
  r.start_ns = s.start_ns.load(std::memory_order_relaxed);
  r.match_ns = s.match_ns.load(std::memory_order_relaxed);
  r.end_ns = s.end_ns.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.version.load(std::memory_order_relaxed) != 2 * id) return std::nullopt;  // overwritten while copied
  return r;
}

std::vector<CallRecord> FlightRecorder::Snapshot() const {
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  std::vector<CallRecord> out;
  out.reserve(last - first + 1);
  for (uint64_t id = first; id <= last; ++id) {
    if (auto r = Read(id)) out.push_back(*r);
  }
  return out;
}

std::optional<CallRecord> FlightRecorder::OldestInFlight(int64_t started_before_ns) const {
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  for (uint64_t id = first; id <= last; ++id) {
    const Slot& s = slots_[id % capacity_];
    if (s.version.load(std::memory_order_acquire) != 2 * id || !InFlight(s.state.load(std::memory_order_acquire)) ||
        s.start_ns.load(std::memory_order_relaxed) > started_before_ns) {
      continue;
    }
    std::optional<CallRecord> r = Read(id);
    if (r && (r->state == CallState::kIssued || r->state == CallState::kMatched)) return r;
  }
  return std::nullopt;
}

Status FlightRecorder::WriteTo(const std::string& dir, int process, int num_processes, int os_pid,
                               const std::string& host,
                               const std::string& reason) const {
  ExitGuard writing;  // a fate-sharing exit waits until the file is whole
  if (!writing.granted()) return Status(Code::kAborted, "the process is exiting: its flight recorder is not written");
  const int64_t offset = WallMinusMonotonicNanos();
  const int64_t now = MonotonicNanos();
  std::string out = "{\"format\": \"myplugin-flight-recorder-1\", \"process\": " + std::to_string(process) +
                    ", \"num_processes\": " + std::to_string(num_processes) + ", \"pid\": " + std::to_string(os_pid) + ", \"host\": " + JsonString(host) +
                    ", \"reason\": " + JsonString(reason) + ", \"written_at\": " + JsonSeconds(now, offset) +
                    ", \"compiling\": " + std::to_string(CompileScope::InProgress()) +
                    ", \"capacity\": " + std::to_string(capacity_) + ", \"recorded\": " + std::to_string(recorded()) +
                    ", \"calls\": [";
  bool first = true;
  for (const CallRecord& r : Snapshot()) {
    out += first ? "\n" : ",\n";
    first = false;
    const bool barrier_name = r.name[0] != '\0';
    out += "  {\"id\": " + std::to_string(r.id) + ", \"op\": " +
           JsonString(barrier_name ? "barrier" : Name(r.signature.op)) +
           ", \"reduction\": " + JsonString(r.signature.op == CollectiveOp::kAllReduce ||
                                                    r.signature.op == CollectiveOp::kReduceScatter
                                                ? Name(r.signature.reduction)
                                                : "") +
           ", \"dtype\": " + JsonString(r.signature.op == CollectiveOp::kBarrier ? "" : Name(r.signature.dtype)) +
           ", \"count\": " + std::to_string(r.signature.count) + ", \"processes\": [";
    for (int i = 0; i < std::min(r.num_processes, CallRecord::kListedProcesses); ++i) {
      out += (i ? ", " : "") + std::to_string(r.processes[i]);
    }
    out += "], \"num_processes\": " + std::to_string(r.num_processes) + ", \"group_hash\": \"" +
           std::to_string(r.signature.group_hash) + "\", \"call\": " + std::to_string(r.signature.sequence) +
           ", \"extra\": \"" + std::to_string(r.signature.extra) + "\", \"name\": " + JsonString(Text(r.name)) +
           ", \"function\": " + JsonString(Text(r.function)) +
           ", \"describe\": " + JsonString(r.Describe()) + ", \"state\": " + JsonString(Name(r.state)) +
           ", \"start\": " + JsonSeconds(r.start_ns, offset) + ", \"match\": " + JsonSeconds(r.match_ns, offset) +
           ", \"end\": " + JsonSeconds(r.end_ns, offset) + "}";
  }
  out += "\n]}\n";
  const std::string path = dir + "/process-" + std::to_string(process) + ".json";
  const std::string tmp = path + ".tmp." + std::to_string(os_pid);
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return Status(Code::kUnavailable, "cannot write the flight recorder to " + tmp + ": " + std::strerror(errno));
  const bool written = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status(Code::kUnavailable, "cannot write the flight recorder to " + path);
  }
  return OkStatus();
}

FunctionScope::FunctionScope(std::string_view function) : outer_(current_function) {
  const size_t n = std::min(function.size(), sizeof(name_) - 1);
  std::memcpy(name_, function.data(), n);
  name_[n] = '\0';
  current_function = name_;
}

FunctionScope::~FunctionScope() { current_function = outer_; }

const char* FunctionScope::Current() { return current_function; }

void CompileStarts::Add(int64_t start_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  starts_.insert(start_ns);
}

void CompileStarts::Remove(int64_t start_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  starts_.erase(starts_.find(start_ns));
}

int CompileStarts::count() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(starts_.size());
}

double CompileStarts::OldestSeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  return starts_.empty() ? 0 : (MonotonicNanos() - *starts_.begin()) / 1e9;
}

uint64_t BarrierUses::Next(uint64_t group_hash) {
  std::lock_guard<std::mutex> lock(mu_);
  return uses_[group_hash]++;
}

CompileScope::CompileScope() : start_ns_(MonotonicNanos()) { ProcessRuntime::Get().compile_starts().Add(start_ns_); }

CompileScope::~CompileScope() { ProcessRuntime::Get().compile_starts().Remove(start_ns_); }

int CompileScope::InProgress() { return ProcessRuntime::Get().compile_starts().count(); }

double CompileScope::OldestSeconds() {
  return ProcessRuntime::Get().compile_starts().OldestSeconds();
}

uint64_t RecordedBarrier::Begin(const std::string& name, const std::vector<int>& members) {
  // The hash covers the name and the members: a barrier of processes [0, 1]
  // and one of [0, 2] under the same name are different barriers.
  std::vector<int64_t> key(name.begin(), name.end());
  key.push_back(-1);
  key.insert(key.end(), members.begin(), members.end());
  Signature sig;
  sig.op = CollectiveOp::kBarrier;
  sig.group_hash = HashInts(key);
  sig.sequence = ProcessRuntime::Get().barrier_uses().Next(sig.group_hash);
  return ProcessRuntime::Get().flight_recorder().Begin(sig, members, name.empty() ? "(unnamed)" : name.c_str());
}

void RecordedBarrier::End(uint64_t id, bool ok, const std::string& why) {
  ProcessRuntime::Get().flight_recorder().End(id, ok);
  if (!ok) DumpFlightRecorder(why);
}

RecordedBarrier::RecordedBarrier(const std::string& name, const std::vector<int>& members)
    : id_(Begin(name, members)) {}

RecordedBarrier::~RecordedBarrier() { ProcessRuntime::Get().flight_recorder().End(id_, true); }

void RecordedBarrier::Fail(const std::string& why) {
  End(id_, false, why);
  id_ = 0;
}

}  // namespace myplugin::collectives

// The flight recorder: every process keeps its last N collectives and
// barriers in a preallocated ring, so that after a hang or a failure each
// process can say what it issued, when, and how far each call got. The
// recording sits on the collective path, so it costs a few relaxed stores and
// clock reads: no lock, no allocation, no system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/signature.h"
#include "common/status.h"

namespace myplugin::collectives {

enum class CallState : uint8_t { kIssued = 1, kMatched, kDone, kFailed };
const char* Name(CallState state);

// One recorded call, read back as a plain copy.
struct CallRecord {
  static constexpr int kListedProcesses = 16;  // more are counted, not listed
  static constexpr size_t kNameBytes = 48;
  uint64_t id = 0;  // 1, 2, ... in issue order, over all groups
  Signature signature;
  CallState state = CallState::kIssued;
  int num_processes = 0;
  int processes[kListedProcesses] = {};
  char name[kNameBytes] = {};  // a barrier's name; empty for collectives
  char function[kNameBytes] = {};  // the jitted function that issued a collective, where known
  int64_t start_ns = 0, match_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC; 0 when not reached

  // "all-reduce sum f32[4] (call #3) on processes [0, 1] in jit_step",
  // "barrier 'x'", or "barrier 'x' (use #2) of processes [0, 2]".
  std::string Describe() const;
  std::vector<int> Processes() const;
};

int64_t MonotonicNanos();
// The wall clock minus the monotonic one, for turning records into times
// that processes (on hosts with synchronized clocks) can compare.
int64_t WallMinusMonotonicNanos();

class FlightRecorder {
 public:
  // The process's one is owned by the process runtime (process_runtime.h),
  // sized by MYPLUGIN_TRACE_BUFFER on first use.
  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records a call as issued; the id goes to Matched and End. `name`: a
  // barrier's; `function`: the jitted function of a collective (both are
  // cut to kNameBytes - 1 bytes; null or empty when not known).
  uint64_t Begin(const Signature& sig, const std::vector<int>& processes, const char* name = nullptr,
                 const char* function = nullptr);
  void Matched(uint64_t id);
  void End(uint64_t id, bool ok);
  // The calls still in the ring, oldest first. Entries being written at the
  // moment are skipped.
  std::vector<CallRecord> Snapshot() const;
  // The oldest call still in flight that started before `started_before_ns`:
  // the watchdog's question, answered from three fields per slot.
  std::optional<CallRecord> OldestInFlight(int64_t started_before_ns) const;
  size_t capacity() const { return capacity_; }
  uint64_t recorded() const { return next_.load(std::memory_order_relaxed); }

  // Writes the ring as JSON to `dir`/process-<process>.json (through a
  // temporary file and a rename: a reader never sees half a file).
  Status WriteTo(const std::string& dir, int process, int num_processes, int os_pid, const std::string& host,
                 const std::string& reason) const;

 private:
  struct Slot;
  std::optional<CallRecord> Read(uint64_t id) const;  // nullopt when the slot holds another call
  std::optional<CallRecord> Copy(uint64_t id) const;  // one seqlock read: nullopt if a writer came meanwhile
  static bool Claim(Slot& s, uint64_t id);            // Begin's hold on the slot: false if a newer call has it
  static bool Reclaim(Slot& s, uint64_t id);          // Matched's and End's: false if the call is gone
  static constexpr int kReadAttempts = 64;
  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};
};

// Names the jitted function whose collectives this thread issues, for its
// duration. The FFI handlers know the name (an attribute of the call); the
// communicator that records the call is reached through the local
// rendezvous and the device layer, which have no other use for it. The
// device whose thread runs the call for the others is one of the same
// call's devices, in the same program, so its own scope names the right
// function.
class FunctionScope {
 public:
  explicit FunctionScope(std::string_view function);
  ~FunctionScope();
  FunctionScope(const FunctionScope&) = delete;
  FunctionScope& operator=(const FunctionScope&) = delete;
  // The innermost scope's name on this thread; nullptr outside any.
  static const char* Current();

 private:
  char name_[CallRecord::kNameBytes];
  const char* outer_;
};

// The start times of the compiles in progress (compiles are rare and slow
// next to a lock; the first is the oldest): one per process, owned by the
// process runtime (process_runtime.h).
class CompileStarts {
 public:
  void Add(int64_t start_ns);
  void Remove(int64_t start_ns);
  int count();
  // Seconds since the oldest began; 0 when none is in progress.
  double OldestSeconds();

 private:
  std::mutex mu_;
  std::multiset<int64_t> starts_;  // under mu_
};

// The number of the next use of each barrier (by its signature's group
// hash): one per process, owned by the process runtime.
class BarrierUses {
 public:
  uint64_t Next(uint64_t group_hash);

 private:
  std::mutex mu_;
  std::map<uint64_t, uint64_t> uses_;  // under mu_
};

// Counts compiles in progress (and when the oldest began), so that a
// straggler report can say that a process is compiling rather than running
// Python code.
class CompileScope {
 public:
  CompileScope();
  ~CompileScope();
  CompileScope(const CompileScope&) = delete;
  CompileScope& operator=(const CompileScope&) = delete;
  static int InProgress();
  // Seconds since the oldest compile in progress began; 0 when none is.
  static double OldestSeconds();

 private:
  int64_t start_ns_;
};

// Records a barrier of the coordination service (of every process, or of
// `members` only) for its duration. Each use of a barrier is numbered (the
// record's call number) per name and members, so that a straggler report
// can tell who reached this use from who reached an earlier one.
class RecordedBarrier {
 public:
  explicit RecordedBarrier(const std::string& name, const std::vector<int>& members = {});
  ~RecordedBarrier();
  // Ends the record as failed and writes the flight recorder.
  void Fail(const std::string& why);
  RecordedBarrier(const RecordedBarrier&) = delete;
  RecordedBarrier& operator=(const RecordedBarrier&) = delete;

  // The same for a barrier whose wait is not one C++ scope (the subset
  // barriers that jax's distributed client runs in Python): Begin returns
  // the record's id for End, which with ok = false writes the recorder.
  static uint64_t Begin(const std::string& name, const std::vector<int>& members);
  static void End(uint64_t id, bool ok, const std::string& why);

 private:
  uint64_t id_;
};

}  // namespace myplugin::collectives

// What the straggler watch's threads share (straggler_watch.cc runs the
// watchdog and responder of every process, straggler_report.cc process 0's
// reporter): the watch's state, its key-value prefix and waits, and helpers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/straggler_watch.h"
#include "coordination/client.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {

// A literal, not a std::string: detached threads may still run during static
// destruction.
constexpr char kPrefix[] = "myplugin/straggler/";
// A blocking get that outlives any job; the loop around it asks again.
constexpr double kLongWaitS = 24 * 3600;
// How long process 0 waits for the processes' answers to one report.
constexpr double kAnswerWaitS = 2.0;
// The stack text a process sends at most.
constexpr size_t kMaxStackBytes = 64 << 10;

struct WatchState {
  WatchOptions options;
  std::weak_ptr<coordination::CoordinationClient> client;
  // This process's coordination id and the job's size as it started (the
  // flight recorder's file names); the current members are read from the
  // runtime (MembershipNow).
  int process = 0;
  int num_processes = 1;
  double straggler_s = 0;
  std::string trace_dir;
  std::mutex dump_mu;
};

// The watch follows the membership: each epoch's keys live under their own
// prefix, in which processes are named by their index among the members (as
// the flight recorder's process groups name them). A process that left is in
// no epoch after its own, so it is never waited for or reported.
coordination::MembershipSnapshot MembershipNow();
std::string EpochPrefix(uint64_t epoch);
// After the job failed (every key-value call fails until the survivors
// agree): waits for an agreement to move the membership past `epoch`;
// false when the job this watch was made for is gone.
bool AwaitNextEpoch(const WatchState& s, uint64_t epoch);

std::string Secs(double s);
std::string Num(double s);
double AgeSeconds(int64_t monotonic_ns);
void PaceRetry(int64_t asked_ns);
std::shared_ptr<coordination::CoordinationClient> ClientOf(const WatchState& s);
// Writes the flight recorder to the trace folder; the folder, or "" on failure.
std::string Dump(WatchState& s, const std::string& reason);
// Process 0's reporter: returns when the job it was started for is gone.
void RunReporter(std::shared_ptr<WatchState> s);

}  // namespace myplugin::collectives

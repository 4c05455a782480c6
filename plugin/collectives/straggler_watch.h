// The straggler watch: C++ threads of every process that notice a call
// waiting longer than MYPLUGIN_STRAGGLER_SECONDS and make the job print one
// report (from the first member: process 0 until a recovery leaves it out)
// naming who has not arrived, what each of those is doing, and its Python
// stack (every thread), fetched live from the laggard. They run even while
// the process's Python holds the GIL or waits for it.
//
// Transport: the coordination service's key-value store, under
// myplugin/straggler/<membership epoch>/, where a process is named by its
// index among the epoch's members. A waiting process's watchdog sets
// waiting/<index> and rings a doorbell; the first member's reporter (blocked
// on the doorbell, so the healthy path costs nothing) lists the waiting keys
// once per tick while any exist, and for each report writes request/<n>;
// every member's responder (blocked on the next request key) answers
// answer/<n>/<index>. Only the first member writes an epoch's request keys,
// so reports never race. After a failure every thread waits for the
// survivors' agreement and goes on in the new epoch, among its members only.
//
// The flight recorder (flight_recorder.h) is written by every process on a
// collective failure or timeout, when the job fails, on SIGUSR1, and on the
// first report of a hang.
#pragma once

#include <string>

#include "common/status.h"

namespace myplugin::collectives {

struct WatchOptions {
  // The signal that makes Python's faulthandler write every thread's stack
  // to `stack_fd` (a file the watch truncates before each capture); 0: none.
  int stack_signal = 0;
  int stack_fd = -1;
  int os_pid = 0;
  std::string host;
  // Install a SIGUSR1 handler that writes the flight recorder (only where
  // SIGUSR1 still has its default action).
  bool dump_on_sigusr1 = true;
};

// Starts the watch for the job the distributed runtime belongs to, with the
// process runtime's settings (checked before the process joined, so a bad
// value never leaves a job half-joined); once per job (a later call for the
// same job is a no-op).
Status StartWatch(const WatchOptions& options);

// Writes this process's flight recorder into the job's trace folder; returns
// the folder, or "" when no watch runs or the write failed.
std::string DumpFlightRecorder(const std::string& reason);

// The job's trace folder ("" before StartWatch).
std::string TraceFolder();

}  // namespace myplugin::collectives

// SIGTERM noticed at once, whatever the main thread is doing.
//
// jax_plugin's preemption sync point (jax_plugin/preemption.py) records a
// preemption notice from its Python SIGTERM handler. Python runs a handler
// only when the main thread next runs Python code, so a SIGTERM that comes
// while the main thread is inside XLA's compile (seconds to minutes) was
// recorded only when the compile returned, and the other processes ran
// their steps on meanwhile, each of which the compiling process then had to
// catch up on: a stop that took twice the compile's rest
// (tests/test_preemption.py). jax's own preemption notifier hears the signal
// in C++ at once.
//
// Install() puts a handler in front of the one installed now (Python's,
// which sets the flag its main thread reads): it writes a byte to a pipe,
// then calls that handler. A thread of its own reads the pipe and calls
// `notice` (once, for the first signal), which records the notice through
// the coordination client with no GIL. The Python handler still runs when
// the main thread gets to it, and keeps its own rules (a second SIGTERM
// ends the process). A later signal.signal() for SIGTERM replaces both.
//
// Process-wide, as signal handlers are: the pipe and the thread are made
// once and never torn down (the thread sleeps in poll() and owns nothing
// but the pipe). A later Install (a later job's sync manager) replaces the
// notice, and the handler chained to where a new one replaced ours.
#pragma once

#include <functional>

#include "common/status.h"

namespace myplugin::coordination {

// FAILED_PRECONDITION when there is no handler to go in front of (SIGTERM's
// default or ignore action: a program that never asked keeps it); `notice`
// then never runs.
Status InstallSigtermNotice(std::function<void()> notice);

}  // namespace myplugin::coordination

// InstallSigtermNotice (coordination/sigterm_notice.h): a SIGTERM runs the
// notice on a thread of its own, once, and still reaches the handler that
// was installed before (Python's, in the product: here a plain one that
// sets a flag, as Python's C handler does); none is installed in front of
// SIGTERM's default action; a second install replaces the notice and keeps
// the handler behind it.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "check.h"
#include "coordination/sigterm_notice.h"
#include "suites.h"

namespace {

volatile sig_atomic_t chained_calls = 0;
void Chained(int) { chained_calls = chained_calls + 1; }

bool WaitFor(const std::atomic<int>& value, int want) {
  for (int i = 0; i < 2000 && value.load() != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return value.load() == want;
}

}  // namespace

void RunSigtermNoticeTests() {
  namespace coord = myplugin::coordination;
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  // Nothing to go in front of: SIGTERM's default stays.
  signal(SIGTERM, SIG_DFL);
  std::atomic<int> first{0}, second{0};
  CHECK(!coord::InstallSigtermNotice([&] { ++first; }).ok());
  // In front of a handler: the notice once, the handler every time.
  signal(SIGTERM, Chained);
  CHECK(coord::InstallSigtermNotice([&] { ++first; }).ok());
  raise(SIGTERM);
  CHECK(WaitFor(first, 1) && chained_calls == 1);
  raise(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(first.load() == 1 && chained_calls == 2);
  // Installed again while still in front: a new notice, the same handler behind.
  CHECK(coord::InstallSigtermNotice([&] { ++second; }).ok());
  raise(SIGTERM);
  CHECK(WaitFor(second, 1) && first.load() == 1 && chained_calls == 3);
  sigaction(SIGTERM, &before, nullptr);
}

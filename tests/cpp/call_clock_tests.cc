// The phases of a collective's waits (collectives/call_clock.h): the
// arrival timeout until every process came, then the stall bound from the
// last progress, never past the call's cap.
#include <chrono>
#include <thread>

#include "check.h"
#include "collectives/call_clock.h"

namespace {

using namespace myplugin::collectives;
using Clock = CallClock::Clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void TestPhases() {
  CallClock clock({/*arrival_s=*/300, /*stall_s=*/2, /*cap_s=*/1000});
  const auto t = Clock::now();
  // Setup, before any call: the arrival timeout alone.
  CHECK(SecondsBetween(t, clock.Deadline(t)) == 300);
  clock.Start();
  CHECK(!clock.agreed() && SecondsBetween(t, clock.Deadline(t)) == 300);
  clock.Agreed();
  // Moving data: each progress starts the stall bound again.
  CHECK(clock.agreed() && SecondsBetween(t, clock.Deadline(t)) == 2);
  const auto later = t + std::chrono::seconds(50);
  CHECK(SecondsBetween(later, clock.Deadline(later)) == 2);
  CHECK(clock.NextWaitSeconds() <= 2 && clock.NextWaitSeconds() > 1.9);
  // The next call waits for arrivals again.
  clock.Start();
  CHECK(!clock.agreed() && SecondsBetween(t, clock.Deadline(t)) > 299);
  CHECK(!clock.CapReached());
}

void TestCap() {
  CallClock clock({/*arrival_s=*/300, /*stall_s=*/60, /*cap_s=*/0.05});
  clock.Start();
  clock.Agreed();
  // Progress goes on, but the call ends at its cap.
  const auto now = Clock::now();
  CHECK(SecondsBetween(now, clock.Deadline(now)) <= 0.05);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  CHECK(clock.CapReached());
  // A wait that starts now still gets a moment, never a negative bound.
  CHECK(clock.NextWaitSeconds() == 1e-3);
  CHECK(clock.Deadline(Clock::now()) <= Clock::now());
}

}  // namespace

void RunCallClockTests() {
  TestPhases();
  TestCap();
}

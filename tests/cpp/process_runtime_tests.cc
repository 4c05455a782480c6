// ProcessRuntime (collectives/process_runtime.h): one owner per process,
// engines loaded once per role with a failed load kept, settings replaced
// whole, an agreement outside a job refused without touching anything, and
// the attachments of the floors above: one object per type, the same on
// every call, made once when eight threads ask for it first at once.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/process_runtime.h"

using myplugin::Code;
using myplugin::Settings;
using myplugin::collectives::ProcessRuntime;

namespace {

void TestOneOwner() {
  CHECK(&ProcessRuntime::Get() == &ProcessRuntime::Get());
  ProcessRuntime& p = ProcessRuntime::Get();
  CHECK(&p.distributed() == &ProcessRuntime::Get().distributed());
  CHECK(&p.communicators() == &ProcessRuntime::Get().communicators());
  CHECK(&p.flight_recorder() == &ProcessRuntime::Get().flight_recorder());
}

void TestEngineLoadedOncePerRole() {
  ProcessRuntime& p = ProcessRuntime::Get();
  int loads = 0;
  auto failing = [&] {
    ++loads;
    return ProcessRuntime::LoadedEngine{nullptr, myplugin::NotFound("no engine here")};
  };
  // The compile engine is never loaded by the other unit tests.
  const auto& first = p.Engine(ProcessRuntime::EngineRole::kCompile, failing);
  const auto& again = p.Engine(ProcessRuntime::EngineRole::kCompile, failing);
  CHECK(loads == 1);
  CHECK(&first == &again);
  CHECK(again.status.code() == Code::kNotFound && again.status.message() == "no engine here");
  CHECK(again.library == nullptr);
}

void TestSettingsReplacedWhole() {
  ProcessRuntime& p = ProcessRuntime::Get();
  std::shared_ptr<const Settings> before = p.settings();
  Settings s = *before;
  s.collective_timeout_s = 7;
  s.transport = "gloo";
  p.UseSettings(s);
  CHECK(p.settings()->collective_timeout_s == 7 && p.settings()->transport == "gloo");
  CHECK(before->transport == "auto");  // a reader's copy does not change under it
  p.UseSettings(*before);
  CHECK(p.settings()->collective_timeout_s == before->collective_timeout_s);
}

void TestAgreementOutsideAJob() {
  auto verdict = ProcessRuntime::Get().AgreeMembership(0.1);
  CHECK(!verdict.ok() && verdict.status().code() == Code::kFailedPrecondition);
}

// Types that no other test attaches, each counting its constructions.
std::atomic<int> first_made{0}, second_made{0}, raced_made{0}, outer_made{0};
struct First {
  First() { ++first_made; }
  int value = 1;
};
struct Second {
  Second() { ++second_made; }
  int value = 2;
};
struct Raced {
  // Slow to make, so that the other threads' first uses arrive while it is.
  Raced() {
    ++raced_made;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
};
struct Outer {
  // A constructor that attaches another type (as a table holding another might).
  Outer() : second(&ProcessRuntime::Get().Attached<Second>()) { ++outer_made; }
  Second* second;
};

void TestOneAttachmentPerType() {
  ProcessRuntime& p = ProcessRuntime::Get();
  First& first = p.Attached<First>();
  Second& second = p.Attached<Second>();
  CHECK(first_made == 1 && second_made == 1);
  CHECK(static_cast<void*>(&first) != static_cast<void*>(&second));
  CHECK(first.value == 1 && second.value == 2);
  first.value = 10;
  // The same object on every call, through any reference to the owner.
  CHECK(&ProcessRuntime::Get().Attached<First>() == &first);
  CHECK(ProcessRuntime::Get().Attached<First>().value == 10);
  CHECK(&p.Attached<Second>() == &second);
  CHECK(first_made == 1 && second_made == 1);
  Outer& outer = p.Attached<Outer>();
  CHECK(outer.second == &second && outer_made == 1 && second_made == 1);
}

void TestAttachedOnceUnderEightThreads() {
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::vector<Raced*> seen(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready < kThreads) std::this_thread::yield();
      seen[i] = &ProcessRuntime::Get().Attached<Raced>();
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(raced_made == 1);
  for (Raced* r : seen) CHECK(r != nullptr && r == seen[0]);
}

}  // namespace

void RunProcessRuntimeTests() {
  TestOneOwner();
  TestEngineLoadedOncePerRole();
  TestSettingsReplacedWhole();
  TestAgreementOutsideAJob();
  TestOneAttachmentPerType();
  TestAttachedOnceUnderEightThreads();
}

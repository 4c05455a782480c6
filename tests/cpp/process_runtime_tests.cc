// ProcessRuntime (collectives/process_runtime.h): one owner per process,
// engines loaded once per role with a failed load kept, settings replaced
// whole, and an agreement outside a job refused without touching anything.
#include <string>

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

}  // namespace

void RunProcessRuntimeTests() {
  TestOneOwner();
  TestEngineLoadedOncePerRole();
  TestSettingsReplacedWhole();
  TestAgreementOutsideAJob();
}

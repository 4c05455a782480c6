#include "collectives/process_runtime.h"

#include <chrono>
#include <cstdio>
#include <utility>

namespace myplugin::collectives {

ProcessRuntime& ProcessRuntime::Get() {
  // Never destroyed: process_runtime.h says why, and what ends instead.
  static ProcessRuntime* runtime = new ProcessRuntime;
  return *runtime;
}

ProcessRuntime::ProcessRuntime() : settings_(std::make_shared<const Settings>()) {}

std::shared_ptr<const Settings> ProcessRuntime::settings() {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

void ProcessRuntime::UseSettings(const Settings& settings) {
  auto s = std::make_shared<const Settings>(settings);
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = std::move(s);
}

StatusOr<Settings> ProcessRuntime::LoadSettings() {
  StatusOr<Settings> s = ParseSettings(ProcessEnvironment);
  if (s.ok()) UseSettings(s.value());
  return s;
}

LibraryChoice ProcessRuntime::library_choice() {
  std::lock_guard<std::mutex> lock(mu_);
  return library_choice_;
}

void ProcessRuntime::SetLibraryChoice(LibraryChoice choice) {
  std::lock_guard<std::mutex> lock(mu_);
  library_choice_ = std::move(choice);
}

std::shared_ptr<WatchState> ProcessRuntime::watch() {
  std::lock_guard<std::mutex> lock(mu_);
  return watch_;
}

void ProcessRuntime::set_watch(std::shared_ptr<WatchState> watch) {
  std::lock_guard<std::mutex> lock(mu_);
  watch_ = std::move(watch);
}

FlightRecorder& ProcessRuntime::flight_recorder() {
  // Sized by the settings of the first use: the job's join (StartWatch
  // asks for it then), else the client's creation.
  std::call_once(recorder_once_, [this] { recorder_ = std::make_unique<FlightRecorder>(settings()->trace_buffer); });
  return *recorder_;
}

Status ProcessRuntime::ShutdownJob(double timeout_s) {
  // Entering shutdown tells the peers that this process issues no more
  // collectives: first every local device's part of the programs launched
  // must have ended (executions_in_flight.h). Bounded: a part whose peer
  // died or stalls ends within the collectives' own bounds.
  const auto waited_from = std::chrono::steady_clock::now();
  if (const int64_t left = executions_in_flight_.WaitForNone(timeout_s); left > 0) {
    std::fprintf(stderr,
                 "myplugin: process %d enters shutdown with %lld device part(s) of its programs still running "
                 "after %.1f s (MYPLUGIN_SHUTDOWN_TIMEOUT)\n",
                 distributed_.process_id(), static_cast<long long>(left),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count());
  }
  // After the barrier: every process has finished its calls, and until then
  // a kernel whose peer died is still the watchdog's to end.
  Status st = distributed_.Shutdown(timeout_s);
  nccl_watchdog_.Stop();
  return st;
}

StatusOr<coordination::msg::Membership> ProcessRuntime::AgreeMembership(double timeout_s) {
  const uint64_t before = distributed_.epoch();
  StatusOr<coordination::msg::Membership> verdict = distributed_.Agree(timeout_s);
  // An unchanged membership keeps its communicators: their rendezvous keys
  // (under the epoch) are spent, so they could not be made again.
  if (verdict.ok() && distributed_.epoch() != before) communicators_.Drop();
  return verdict;
}

const ProcessRuntime::LoadedEngine& ProcessRuntime::Engine(EngineRole role,
                                                           const std::function<LoadedEngine()>& load) {
  const int i = static_cast<int>(role);
  std::call_once(engine_once_[i], [&] { engines_[i] = load(); });
  return engines_[i];
}

StatusOr<NcclDeviceGroups*> ProcessRuntime::nccl_device_groups(
    const std::function<StatusOr<NcclDeviceGroups*>()>& make) {
  std::call_once(nccl_once_, [&] {
    StatusOr<NcclDeviceGroups*> made = make();
    if (made.ok()) {
      nccl_device_groups_ = made.value();
    } else {
      nccl_error_ = made.status();
    }
  });
  if (nccl_device_groups_ == nullptr) return nccl_error_;
  return nccl_device_groups_;
}

}  // namespace myplugin::collectives

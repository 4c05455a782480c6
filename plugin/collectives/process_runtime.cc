#include "collectives/process_runtime.h"

namespace myplugin::collectives {

ProcessRuntime& ProcessRuntime::Get() {
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

}  // namespace myplugin::collectives

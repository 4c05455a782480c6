// The process's runtime: the one owner of the process-wide state that the
// PJRT library and the Python module share (they link one libmyplugin_runtime.so).
#pragma once

#include <memory>
#include <mutex>

#include "common/settings.h"
#include "common/status.h"

namespace myplugin::collectives {

class ProcessRuntime {
 public:
  static ProcessRuntime& Get();

  // The settings of the process's collectives, straggler watch and flight
  // recorder: parsed where a client is created or a job joined (the
  // environment can only be wrong there), the defaults before either.
  std::shared_ptr<const Settings> settings();
  void UseSettings(const Settings& settings);
  // ParseSettings(ProcessEnvironment), then UseSettings; the parse error
  // (INVALID_ARGUMENT naming the variable) when a value is malformed.
  StatusOr<Settings> LoadSettings();

 private:
  ProcessRuntime();
  std::mutex mu_;
  std::shared_ptr<const Settings> settings_;  // under mu_
};

}  // namespace myplugin::collectives

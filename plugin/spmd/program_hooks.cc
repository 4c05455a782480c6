#include "spmd/program_hooks.h"

#include <mutex>

namespace myplugin::spmd {
namespace {
std::mutex mu;
ProgramHooks& Hooks() {
  static ProgramHooks* hooks = new ProgramHooks();  // never destroyed: may be called during exit
  return *hooks;
}
}  // namespace

void SetProgramHooks(ProgramHooks hooks) {
  std::lock_guard<std::mutex> lock(mu);
  Hooks() = std::move(hooks);
}

ProgramHooks GetProgramHooks() {
  std::lock_guard<std::mutex> lock(mu);
  return Hooks();
}

}  // namespace myplugin::spmd

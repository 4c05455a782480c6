#include "spmd/program_hooks.h"

#include "common/hook_slot.h"

namespace myplugin::spmd {
namespace {
HookSlot<ProgramHooks>& Slot() {
  static auto* slot = new HookSlot<ProgramHooks>();
  return *slot;
}
}  // namespace

void SetProgramHooks(ProgramHooks hooks) { Slot().Set(std::move(hooks)); }
ProgramHooks GetProgramHooks() { return Slot().Get(); }

}  // namespace myplugin::spmd

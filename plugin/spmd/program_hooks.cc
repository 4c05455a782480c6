#include "spmd/program_hooks.h"

#include "collectives/process_runtime.h"
#include "common/hook_slot.h"

namespace myplugin::spmd {
namespace {
HookSlot<ProgramHooks>& Slot() { return collectives::ProcessRuntime::Get().Attached<HookSlot<ProgramHooks>>(); }
}  // namespace

void SetProgramHooks(ProgramHooks hooks) { Slot().Set(std::move(hooks)); }
ProgramHooks GetProgramHooks() { return Slot().Get(); }

}  // namespace myplugin::spmd

#include "spmd/cost_analysis_hook.h"

#include "collectives/process_runtime.h"
#include "common/hook_slot.h"

namespace myplugin::spmd {
namespace {
HookSlot<CostAnalysisHook>& Slot() { return collectives::ProcessRuntime::Get().Attached<HookSlot<CostAnalysisHook>>(); }
}  // namespace

void SetCostAnalysisHook(CostAnalysisHook hook) { Slot().Set(std::move(hook)); }
CostAnalysisHook GetCostAnalysisHook() { return Slot().Get(); }

}  // namespace myplugin::spmd

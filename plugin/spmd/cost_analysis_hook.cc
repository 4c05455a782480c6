#include "spmd/cost_analysis_hook.h"

#include "common/hook_slot.h"

namespace myplugin::spmd {
namespace {
HookSlot<CostAnalysisHook>& Slot() {
  static auto* slot = new HookSlot<CostAnalysisHook>();
  return *slot;
}
}  // namespace

void SetCostAnalysisHook(CostAnalysisHook hook) { Slot().Set(std::move(hook)); }
CostAnalysisHook GetCostAnalysisHook() { return Slot().Get(); }

}  // namespace myplugin::spmd

#include "spmd/cost_analysis_hook.h"

#include <mutex>

namespace myplugin::spmd {
namespace {
std::mutex mu;
CostAnalysisHook& Hook() {
  static CostAnalysisHook* hook = new CostAnalysisHook();  // never destroyed: may be called during exit
  return *hook;
}
}  // namespace

void SetCostAnalysisHook(CostAnalysisHook hook) {
  std::lock_guard<std::mutex> lock(mu);
  Hook() = std::move(hook);
}

CostAnalysisHook GetCostAnalysisHook() {
  std::lock_guard<std::mutex> lock(mu);
  return Hook();
}

}  // namespace myplugin::spmd

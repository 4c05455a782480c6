// XLA's cost analysis (flops, transcendentals, bytes accessed) of an
// optimized HLO module. The engine's C API does not answer it for the
// executables it compiles, and C++ here has no HLO library, so jaxlib's
// HloCostAnalysis computes it (jax_plugin/cost_analysis.py), as it does for
// jax's own CPU backend. Like the multi-process compile's steps
// (program_hooks.h), the Python module installs it, and the registry lives
// in the shared runtime library so that the PJRT library sees the same one.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace myplugin::spmd {

// (property, value) pairs, in the order jaxlib listed them.
using CostProperties = std::vector<std::pair<std::string, double>>;
// Takes a serialized HloModuleProto.
using CostAnalysisHook = std::function<StatusOr<CostProperties>(const std::string& hlo_module_proto)>;

void SetCostAnalysisHook(CostAnalysisHook hook);
// Null until the Python package installed it.
CostAnalysisHook GetCostAnalysisHook();

}  // namespace myplugin::spmd

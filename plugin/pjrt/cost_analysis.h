// PJRT_Executable_GetCostAnalysis for the engine's executables. The engine
// answers UNIMPLEMENTED (its executables leave XLA's default in place), which
// jax turns into `compiled.cost_analysis() is None`. We then run XLA's
// HloCostAnalysis on the engine's optimized module through jaxlib
// (spmd/cost_analysis_hook.h): the same analysis, over the same kind of
// module, that jax's own CPU backend reports.
#pragma once

#include "pjrt_c_api.h"

namespace myplugin {

PJRT_Error* ExecutableGetCostAnalysis(PJRT_Executable_GetCostAnalysis_Args* args);

// The properties live as long as the executable: drop them with it.
void ForgetCostAnalysis(PJRT_Executable* engine_executable);

}  // namespace myplugin

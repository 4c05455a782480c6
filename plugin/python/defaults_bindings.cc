// _myplugin.DEFAULTS: the defaults that C++ defines (common/settings.h,
// coordination/defaults.h, collectives/defaults.h), for jax_plugin's signatures, the launcher and
// the CLI, so that Python never writes a number of its own.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <map>
#include <string>

#include "collectives/defaults.h"
#include "common/settings.h"
#include "coordination/defaults.h"
#include "engine/gpu_target.h"
#include "python/bindings.h"
#include "python/status_exception.h"

namespace nb = nanobind;

namespace myplugin::python {

void BindDefaults(nb::module_& m) {
  namespace coll = myplugin::collectives;
  namespace coord = myplugin::coordination;
  nb::dict d;
  d["heartbeat_timeout"] = coord::kDefaultHeartbeatTimeoutSeconds;
  d["initialization_timeout"] = coord::kDefaultInitializationTimeoutSeconds;
  d["shutdown_timeout"] = coord::kDefaultShutdownTimeoutSeconds;
  d["agreement_timeout"] = coord::kDefaultAgreementTimeoutSeconds;
  d["collective_timeout"] = myplugin::kDefaultCollectiveTimeoutSeconds;
  d["collective_stall"] = myplugin::kDefaultCollectiveStallSeconds;
  d["collective_cap"] = myplugin::kDefaultCollectiveCapSeconds;
  d["peer_exit_grace"] = myplugin::kDefaultPeerExitGraceSeconds;
  d["straggler_seconds"] = myplugin::kDefaultStragglerSeconds;
  d["trace_buffer"] = myplugin::kDefaultTraceBuffer;
  d["min_trace_buffer"] = myplugin::kMinTraceBuffer;
  d["max_trace_buffer"] = myplugin::kMaxTraceBuffer;
  d["transport"] = myplugin::kDefaultTransport;
  d["nccl_agreement"] = myplugin::kDefaultNcclAgreement;
  d["combine_threshold_bytes"] = coll::kDefaultCombineThresholdBytes;
  d["form_reduce_scatters"] = coll::kDefaultFormReduceScatters;
  m.attr("DEFAULTS") = d;
  nb::list variables;
  for (const std::string& v : myplugin::SettingVariables()) variables.append(v);
  // The variables C++ reads, each of which the configuration page shows.
  m.attr("SETTING_VARIABLES") = variables;

  // jax's GPU memory settings as the CUDA engine is given them, for an
  // environment: the create options jax's CUDA backend would make of it
  // (jaxlib's generate_pjrt_gpu_plugin_options), where the tests compare
  // the two, and the launcher checks a shared GPU's shares.
  m.def("gpu_memory_settings", [](const std::map<std::string, std::string>& env) {
    StatusOr<Settings> settings = ParseSettings([&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    const GpuMemorySettings& g = ValueOrThrow(std::move(settings)).gpu_memory;
    nb::dict d;
    d["allocator"] = g.allocator;
    if (g.memory_fraction) d["memory_fraction"] = *g.memory_fraction;
    if (g.preallocate) d["preallocate"] = *g.preallocate;
    if (g.collective_memory_bytes) d["collective_memory_size"] = *g.collective_memory_bytes;
    return d;
  });

  // The GpuTargetConfigProto text that a compile-only topology of `gpu`
  // hands the CUDA engine, for another backend's compile-only topology of
  // the same GPU (bench/gpu_schedule.py compiles one program through jax's
  // own CUDA backend beside ours for the same target).
  m.def("gpu_target_config", [](const std::string& gpu, int cuda_major) {
    return TargetConfigText(ValueOrThrow(FindGpu(gpu)), cuda_major);
  }, nb::arg("gpu"), nb::arg("cuda_major"));
}

}  // namespace myplugin::python

// _myplugin.DEFAULTS: the defaults that C++ defines (common/settings.h,
// coordination/defaults.h, collectives/defaults.h), for jax_plugin's signatures, the launcher and
// the CLI, so that Python never writes a number of its own.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "collectives/defaults.h"
#include "common/settings.h"
#include "coordination/defaults.h"
#include "python/bindings.h"

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
  d["combine_threshold_bytes"] = coll::kDefaultCombineThresholdBytes;
  m.attr("DEFAULTS") = d;
  nb::list variables;
  for (const std::string& v : myplugin::SettingVariables()) variables.append(v);
  // The variables C++ reads, each of which the configuration page shows.
  m.attr("SETTING_VARIABLES") = variables;
}

}  // namespace myplugin::python

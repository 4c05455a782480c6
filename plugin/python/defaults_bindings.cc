// _myplugin.DEFAULTS: the defaults that C++ defines (coordination/defaults.h,
// collectives/defaults.h), for jax_plugin's signatures, the launcher and
// the CLI, so that Python never writes a number of its own.
#include <nanobind/nanobind.h>

#include "collectives/defaults.h"
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
  d["collective_timeout"] = coll::kDefaultCollectiveTimeoutSeconds;
  d["collective_stall"] = coll::kDefaultCollectiveStallSeconds;
  d["collective_cap"] = coll::kDefaultCollectiveCapSeconds;
  d["peer_exit_grace"] = coll::kDefaultPeerExitGraceSeconds;
  d["straggler_seconds"] = coll::kDefaultStragglerSeconds;
  d["trace_buffer"] = coll::kDefaultTraceBuffer;
  d["min_trace_buffer"] = coll::kMinTraceBuffer;
  d["max_trace_buffer"] = coll::kMaxTraceBuffer;
  d["transport"] = coll::kDefaultTransport;
  d["combine_threshold_bytes"] = coll::kDefaultCombineThresholdBytes;
  m.attr("DEFAULTS") = d;
}

}  // namespace myplugin::python

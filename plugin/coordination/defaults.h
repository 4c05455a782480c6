// The defaults of a job's timeouts, defined here once: the C++ options
// start from them, jax_plugin reads them as _myplugin.DEFAULTS (the
// launcher's, the CLI's and distributed.initialize's defaults), and
// docs/gen_configuration.py writes them into docs/configuration.md (a test
// checks the page is current).
#pragma once

namespace myplugin::coordination {

// A process silent this long is declared failed (MYPLUGIN_HEARTBEAT_TIMEOUT).
inline constexpr double kDefaultHeartbeatTimeoutSeconds = 100;
// Every process must have registered within this (MYPLUGIN_INITIALIZATION_TIMEOUT).
inline constexpr double kDefaultInitializationTimeoutSeconds = 300;
// The shutdown barrier's bound (MYPLUGIN_SHUTDOWN_TIMEOUT).
inline constexpr double kDefaultShutdownTimeoutSeconds = 300;
// How long the survivors of a failure have, from the first that asks, to
// all ask for the membership agreement (jax_plugin.distributed.recover).
inline constexpr double kDefaultAgreementTimeoutSeconds = 120;

}  // namespace myplugin::coordination

// The settings C++ reads from the environment, parsed and checked in one
// place when a client or a job starts, then handed to what uses them.
//
// The defaults are defined here once: jax_plugin reads them as
// _myplugin.DEFAULTS, and docs/gen_configuration.py writes them into
// docs/configuration.md (a test checks the page is current). Variables read
// by processes that never start a client (the launcher, the coordinator
// CLI) are Python's and stay there.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/gpu_memory_settings.h"
#include "common/status.h"

namespace myplugin {

// How long a collective waits for every process to reach it
// (MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS).
inline constexpr double kDefaultCollectiveTimeoutSeconds = 300;
// Once all have, how long it may go without progress: no step done, no
// piece of data received (MYPLUGIN_COLLECTIVE_STALL_SECONDS).
inline constexpr double kDefaultCollectiveStallSeconds = 60;
// The bound on a whole call, however it moves (MYPLUGIN_COLLECTIVE_CAP_SECONDS).
inline constexpr double kDefaultCollectiveCapSeconds = 3600;
// How long a call may still wait for a process that has finished
// (MYPLUGIN_PEER_EXIT_GRACE_SECONDS).
inline constexpr double kDefaultPeerExitGraceSeconds = 5;
// A wait longer than this makes process 0 print a straggler report
// (MYPLUGIN_STRAGGLER_SECONDS; 0 is off).
inline constexpr double kDefaultStragglerSeconds = 15;
// The calls each flight recorder keeps (MYPLUGIN_TRACE_BUFFER), and the range
// accepted: at least 16, because the watchdog finds calls in flight there.
inline constexpr size_t kDefaultTraceBuffer = 2000;
inline constexpr size_t kMinTraceBuffer = 16;
inline constexpr size_t kMaxTraceBuffer = size_t{1} << 24;
// How a process group's processes move collective data (MYPLUGIN_TRANSPORT): "auto"
// is shared memory when they all share this host, hierarchical (shared
// memory within each host, Gloo between them) when they span hosts that
// each hold several of them and kHierarchicalAcrossHosts, else Gloo;
// "shm", "gloo" and "hierarchical" force one.
inline constexpr const char* kDefaultTransport = "auto";
// When an NCCL call across processes agrees on its signature with the
// other processes (MYPLUGIN_NCCL_AGREEMENT): "beside" enqueues it first and
// agrees on a thread of its own, holding the call's result on the GPU until
// it agrees (collectives/agreement_gate.h); "before" agrees on the thread
// that launches the kernels, then enqueues.
inline constexpr const char* kDefaultNcclAgreement = "beside";

// Returns the value of an environment variable, or null when unset: the
// process's environment (ProcessEnvironment) or, in tests, a map.
using EnvLookup = std::function<const char*(const char*)>;

struct Settings {
  double collective_timeout_s = kDefaultCollectiveTimeoutSeconds;  // MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS
  double collective_stall_s = kDefaultCollectiveStallSeconds;      // MYPLUGIN_COLLECTIVE_STALL_SECONDS
  double collective_cap_s = kDefaultCollectiveCapSeconds;          // MYPLUGIN_COLLECTIVE_CAP_SECONDS
  double peer_exit_grace_s = kDefaultPeerExitGraceSeconds;         // MYPLUGIN_PEER_EXIT_GRACE_SECONDS
  double straggler_s = kDefaultStragglerSeconds;                   // MYPLUGIN_STRAGGLER_SECONDS (0: off)
  size_t trace_buffer = kDefaultTraceBuffer;                       // MYPLUGIN_TRACE_BUFFER
  // MYPLUGIN_TRACE_DIR; empty: a per-job folder under temp_dir.
  std::string trace_dir;
  std::string transport = kDefaultTransport;  // MYPLUGIN_TRANSPORT: auto, shm, gloo or hierarchical
  std::string nccl_agreement = kDefaultNcclAgreement;  // MYPLUGIN_NCCL_AGREEMENT: beside or before
  // MYPLUGIN_SPMD_REWRITE=always: every program of several devices takes the
  // multi-process compile, even in one process (to test that path).
  bool spmd_rewrite_always = false;
  // MYPLUGIN_SPMD_LOG (set, and not 0): a line per step of a multi-process compile.
  bool spmd_log = false;
  std::string temp_dir = "/tmp";  // TMPDIR
  std::string nccl_host_id;       // NCCL_HOSTID (NCCL's own; named in its errors)
  // jax's GPU memory variables (XLA_PYTHON_CLIENT_ALLOCATOR, ...), for the CUDA engine.
  GpuMemorySettings gpu_memory;
};

// The settings `getenv` describes; unset and empty variables take their
// defaults. A malformed value is an INVALID_ARGUMENT that names the variable,
// the value and what is accepted.
StatusOr<Settings> ParseSettings(const EnvLookup& getenv);

// The variables ParseSettings reads, for the check that the configuration
// page shows each.
const std::vector<std::string>& SettingVariables();

// The process's environment: the one place in plugin/ that reads it.
const char* ProcessEnvironment(const char* name);

}  // namespace myplugin

// The defaults of the collectives' settings, defined here once: the
// environment overrides them (communicator_cache.cc reads it), jax_plugin
// reads them as _myplugin.DEFAULTS, and docs/gen_configuration.py writes
// them into docs/configuration.md (a test checks the page is current).
#pragma once

#include <cstddef>

namespace myplugin::collectives {

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

// The most bytes one call of a combined collective carries: the
// multi-process rewrite (jax_plugin/spmd/buckets.py) makes independent
// all-reduces, all-gathers and reduce-scatters of a program one call per
// bucket of at most this size, as XLA's combiners do
// (MYPLUGIN_COMBINE_THRESHOLD_BYTES; 0 makes one call each). XLA's own
// default for GPUs (xla_gpu_all_reduce_combine_threshold_bytes).
inline constexpr size_t kDefaultCombineThresholdBytes = size_t{30} << 20;

// The shared-memory all-reduce writes results of at least this many bytes
// with stores that bypass the cache (streaming_copy.h): larger than a
// core's share of the last-level cache, they would only evict.
inline constexpr size_t kStreamingCopyBytes = size_t{8} << 20;
// What "auto" picks for a group across hosts that each hold several of its
// processes: hierarchical, else Gloo over the whole group. Chosen by
// bench/collectives.py --hosts (docs/performance.md, "Across hosts").
inline constexpr bool kHierarchicalAcrossHosts = true;

}  // namespace myplugin::collectives

// The collectives' constants and the defaults that are not settings of
// C++ (those are in common/settings.h), defined here once: jax_plugin reads
// them as _myplugin.DEFAULTS, and docs/gen_configuration.py writes them into
// docs/configuration.md (a test checks the page is current).
#pragma once

#include <cstddef>

#include "common/settings.h"

namespace myplugin::collectives {

// The most bytes one call of a combined collective carries: the
// multi-process rewrite (jax_plugin/spmd/buckets.py) makes independent
// all-reduces, all-gathers and reduce-scatters of a program one call per
// bucket of at most this size, as XLA's combiners do
// (MYPLUGIN_COMBINE_THRESHOLD_BYTES; 0 makes one call each). XLA's own
// default for GPUs (xla_gpu_all_reduce_combine_threshold_bytes).
inline constexpr size_t kDefaultCombineThresholdBytes = size_t{30} << 20;
// Whether the multi-process rewrite makes the partitioner's all-reduce
// followed by each device's slice of it a reduce-scatter
// (jax_plugin/spmd/reduce_scatter.py), as XLA's GPU pipeline does
// (MYPLUGIN_FORM_REDUCE_SCATTERS=0 keeps the pair, for comparing).
inline constexpr bool kDefaultFormReduceScatters = true;

// The shared-memory all-reduce writes results of at least this many bytes
// with stores that bypass the cache (streaming_copy.h): larger than a
// core's share of the last-level cache, they would only evict.
inline constexpr size_t kStreamingCopyBytes = size_t{8} << 20;
// What "auto" picks for a group across hosts that each hold several of its
// processes: hierarchical, else Gloo over the whole group. Chosen by
// bench/collectives.py --hosts (docs/performance.md, "Across hosts").
inline constexpr bool kHierarchicalAcrossHosts = true;
// How long a process whose link to a peer broke (a collective's connection,
// a transfer, an NCCL communicator) waits for the coordination service to
// say why: the peer's failure or mismatch report usually comes within moments.
inline constexpr double kFailureNoticeWaitS = 3.0;
// How often the NCCL watchdog (nccl_watchdog.h) asks each NCCL communicator
// for an asynchronous error: a kernel whose peer died is aborted within about
// this plus the wait for its cause. A poll is one ncclCommGetAsyncError per
// communicator; PyTorch's ProcessGroupNCCL watchdog polls as often
// (its kWatchdogThreadSleepMillis, 100 ms).
inline constexpr double kNcclWatchdogPollS = 0.1;
// How long an abort of an NCCL communicator waits for the call under way
// (between its guard and NCCL's return) to leave: ncclCommAbort frees the
// communicator, which a call about to be enqueued would then use. A call
// still there after this is blocked inside NCCL, which the abort ends.
inline constexpr double kNcclAbortWaitS = 1.0;

}  // namespace myplugin::collectives

// The coordination service's limits, defined here once. The service enforces
// them, the client checks them before sending (so that an oversize request
// is a clear error, never a dropped connection), and Python reads them
// through the module's COORDINATION_LIMITS. Frame and Hello sizes live in
// wire.h beside the framing they bound.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace myplugin::coordination {

// Keys and barrier names. jax's, orbax's, Gloo's and ours are well under
// 1 KiB (a name plus a hash).
inline constexpr size_t kMaxKeyBytes = 4u << 10;
// One value. jax's largest (a serialized executable shared between hosts
// under jax_share_binary_between_hosts) is the one that can come near it.
inline constexpr size_t kMaxValueBytes = 32u << 20;
// Keys plus values of the whole store.
inline constexpr size_t kMaxStoreBytes = 256u << 20;
// Blocking gets and open barriers, job-wide: each holds a key or a name.
// A big job gets four for each of its processes (each can wait in a few
// calls at once: a blocking get per process must never be refused).
inline constexpr size_t kMaxWaiting = 16384;
inline constexpr size_t MaxWaitingFor(int num_processes) {
  return num_processes > static_cast<int>(kMaxWaiting / 4) ? 4 * static_cast<size_t>(num_processes) : kMaxWaiting;
}
// Blocking gets and barriers one process has waiting at once: a client
// waits in one call per thread, so real ones stay far below; a process that
// loops asynchronous gets is stopped here, before it holds the job-wide
// budget above. 64 processes at the cap fill exactly that budget.
inline constexpr size_t kMaxWaitingPerProcess = 256;
// One process's topology (hostname, devices); the Topology reply carries all.
inline constexpr size_t kMaxTopologyBytes = 64u << 10;
// A failure reason is broadcast to every process: longer ones are cut.
inline constexpr size_t kMaxReasonBytes = 4u << 10;
// Bytes waiting to be sent to one connection; beyond it the peer is not
// reading and is dropped. Two of the largest frames fit.
inline constexpr size_t kMaxSendQueueBytes = 2 * (64u << 20);
// Connections at once (members, and peers still saying Hello), unless the
// caller says: the job's processes and as many again (restarted processes,
// strays, peers still saying Hello), and never fewer than this. Each costs
// a descriptor and a little memory (the event loop serves all of them).
inline constexpr int kDefaultMaxConnections = 2048;
inline constexpr int MaxConnectionsFor(int num_processes) {
  return num_processes > kDefaultMaxConnections / 2 ? 2 * num_processes : kDefaultMaxConnections;
}
// The service's event-loop threads, unless the caller says: one for each
// kProcessesPerIoThread processes of the job, at most kMaxIoThreads and
// never more than half the machine's cores (the rest are the job's: the
// host of the service is often process 0). A barrier's release is one send
// per process, each a few microseconds of the sender's CPU over TCP
// (bench/coordination_scale: about 13 us a process for an arrival and a
// release over loopback): one thread takes some 27 ms for 2,048 processes,
// and a job of 16,384 spreads its release over 8 cores. On 2 cores shared
// with the load, a second loop gained nothing and cost 40 % more CPU
// (docs/performance.md).
inline constexpr int kProcessesPerIoThread = 2048;
inline constexpr int kMaxIoThreads = 8;
inline constexpr int IoThreadsFor(int num_processes, int cores) {
  const int want = num_processes <= kProcessesPerIoThread ? 1 : (num_processes + kProcessesPerIoThread - 1) / kProcessesPerIoThread;
  const int half = cores / 2 < 1 ? 1 : cores / 2;
  const int most = half < kMaxIoThreads ? half : kMaxIoThreads;
  return want < most ? want : most;
}
// Descriptors the service needs beyond its connections (the listener, the
// event loop's, the host's own files).
inline constexpr int kSpareDescriptors = 64;

// "80 MiB", "4 KiB", "12 bytes".
std::string ByteCount(size_t n);

// A key or prefix in an error message: quoted, and cut at 200 bytes (an
// over-long key must not make an over-long error).
std::string QuotedKey(const std::string& key);

// RESOURCE_EXHAUSTED naming `what` ("key_value_set of \"k\"") when the key or
// the value is over its limit.
Status CheckKey(const std::string& what, const std::string& key);
Status CheckKeyValue(const std::string& what, const std::string& key, const std::string& value);

}  // namespace myplugin::coordination

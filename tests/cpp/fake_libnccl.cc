// A stand-in libnccl.so.2 for NcclApi::Load and the NCCL communicator's
// error path: every entry point the NCCL backend resolves. ncclGetVersion
// answers FAKE_NCCL_VERSION_CODE (set by CMake); the others succeed and
// move nothing, and ncclCommGetAsyncError reports the error that a test
// injects (myplugin_fake_nccl_fail_after, myplugin_fake_nccl_fail_in). Each
// communicator keeps its state (live, aborted, destroyed) and its polls, a
// use of one already ended is counted, and
// a "kernel in flight" (myplugin_fake_nccl_wait_kernel) ends only when its
// communicator is aborted, as a real one whose peer died does. It also
// stands in for the CUDA driver's entry points (NcclApi::Load's
// driver_path: fills, copies, a stream's synchronization) on host memory:
// the stand-in's "device" memory.
// Built twice, as an NCCL older than the minimum and as one new enough.
#include <cuda.h>
#include <nccl.h>

#include <cstring>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace {

// Polls of ncclCommGetAsyncError left before it reports `g_async_error`
// (negative: never).
std::atomic<int> g_polls_left{-1};
std::atomic<ncclResult_t> g_async_error{ncclSuccess};
std::atomic<int> g_aborts{0};

// From this time on (steady clock, ns; negative: never), every live
// communicator's ncclCommGetAsyncError reports `g_timed_error`.
std::atomic<long long> g_error_from_ns{-1};
std::atomic<ncclResult_t> g_timed_error{ncclSuccess};
// Healthy polls answer ncclInProgress every other time, as a communicator
// whose (nonblocking) work is under way does.
std::atomic<bool> g_in_progress{false};

enum State { kLive, kAborted, kDestroyed };
struct Comm {
  std::atomic<int> state{kLive};
  std::atomic<int> polls{0};
};
// What ncclCommInitRank hands out, in turn; never freed, so a poll of a
// communicator after its end is counted, not a crash.
constexpr int kComms = 4096;
Comm g_comms[kComms];
std::atomic<int> g_next_comm{0};
std::atomic<int> g_used_after_end{0};
std::mutex g_mu;
std::condition_variable g_aborted;  // under g_mu

Comm* Of(ncclComm_t comm) { return reinterpret_cast<Comm*>(comm); }

// A call enqueued on an ended communicator uses memory NCCL freed: counted.
ncclResult_t Enqueued(ncclComm_t comm) {
  if (Of(comm)->state != kLive) ++g_used_after_end;
  return ncclSuccess;
}

long long NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

extern "C" {

// Test-only: from its `polls`-th call on (counting from 1), ncclCommGetAsyncError
// reports `error`, as NCCL does once a kernel in flight lost its peer.
// `polls` < 1 ends the injection.
void myplugin_fake_nccl_fail_after(int polls, ncclResult_t error) {
  g_async_error = error;
  g_polls_left = polls < 1 ? -1 : polls;
}
// Test-only: `ms` milliseconds from now on, every live communicator's
// ncclCommGetAsyncError reports `error`; `ms` < 0 ends the injection.
void myplugin_fake_nccl_fail_in(int ms, ncclResult_t error) {
  g_timed_error = error;
  g_error_from_ns = ms < 0 ? -1 : NowNs() + static_cast<long long>(ms) * 1000000;
}
// Test-only: healthy polls answer ncclInProgress every other time (`on`).
void myplugin_fake_nccl_in_progress(int on) { g_in_progress = on != 0; }
// Test-only: how many times ncclCommAbort was called.
int myplugin_fake_nccl_aborts() { return g_aborts; }
// Test-only: ncclCommGetAsyncError calls on `comm`; and calls of
// ncclCommGetAsyncError, ncclCommAbort, ncclCommDestroy or a collective on
// any communicator after it was aborted or destroyed (NCCL's is gone then).
int myplugin_fake_nccl_polls(ncclComm_t comm) { return Of(comm)->polls; }
int myplugin_fake_nccl_used_after_end() { return g_used_after_end; }
// Test-only: the communicator ncclCommInitRank handed out last.
ncclComm_t myplugin_fake_nccl_last_comm() {
  return reinterpret_cast<ncclComm_t>(&g_comms[(g_next_comm.load() + kComms - 1) % kComms]);
}
// Test-only: the host waiting for a kernel of `comm` (a stream
// synchronization): 1 once `comm` is aborted, 0 after `timeout_s` without.
int myplugin_fake_nccl_wait_kernel(ncclComm_t comm, double timeout_s) {
  std::unique_lock<std::mutex> lock(g_mu);
  return g_aborted.wait_for(lock, std::chrono::duration<double>(timeout_s),
                            [&] { return Of(comm)->state == kAborted; })
             ? 1
             : 0;
}

ncclResult_t ncclGetVersion(int* version) {
  *version = FAKE_NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  *id = ncclUniqueId{};
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  Comm* made = &g_comms[g_next_comm++ % kComms];
  made->state = kLive;
  made->polls = 0;
  *comm = reinterpret_cast<ncclComm_t>(made);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (Of(comm)->state != kLive) ++g_used_after_end;
  Of(comm)->state = kDestroyed;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ++g_aborts;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (Of(comm)->state != kLive) ++g_used_after_end;
    Of(comm)->state = kAborted;
  }
  g_aborted.notify_all();
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  Comm* c = Of(comm);
  const int polls = ++c->polls;
  if (c->state != kLive) ++g_used_after_end;
  int left = g_polls_left;
  if (left > 1) g_polls_left = left - 1;
  const long long from = g_error_from_ns;
  if (left == 1) {
    *error = g_async_error.load();
  } else if (from >= 0 && NowNs() >= from) {
    *error = g_timed_error.load();
  } else {
    *error = g_in_progress && polls % 2 == 0 ? ncclInProgress : ncclSuccess;
  }
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclRemoteError ? "remote process exited or there was a network error" : "fake NCCL error";
}
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm, cudaStream_t) {
  return Enqueued(comm);
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t comm, cudaStream_t) {
  return Enqueued(comm);
}
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm,
                               cudaStream_t) {
  return Enqueued(comm);
}
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) { return Enqueued(comm); }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) { return Enqueued(comm); }
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream) {
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream) {
  unsigned int* out = reinterpret_cast<unsigned int*>(dst);
  for (size_t i = 0; i < count; ++i) out[i] = value;
  return CUDA_SUCCESS;
}

// cuda.h names these cuMemcpyDtoHAsync_v2 and cuMemcpyDtoDAsync_v2: the
// symbols NcclApi::Load looks up.
CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
// The gate word (agreement_gate.h): host memory that is its own device
// address; the stand-in's streams run nothing later, so a wait is only
// checked for its word.
CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = ::operator new(bytes);
  std::memset(*p, 0, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemHostGetDevicePointer(CUdeviceptr* device, void* host, unsigned int) {
  *device = reinterpret_cast<CUdeviceptr>(host);
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitValue32(CUstream, CUdeviceptr addr, cuuint32_t, unsigned int) {
  return addr == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

}  // extern "C"

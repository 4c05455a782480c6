// The NCCL entry points we use, resolved from libnccl.so.2 at run time (it
// comes from the nvidia-nccl-cu12 wheel, and only GPU machines need it), or
// filled in by a test with fakes, and the one CUDA driver call the NCCL path
// makes. Types come from NCCL's and CUDA's own headers.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <string>

#include "common/status.h"

namespace myplugin::collectives {

// The oldest NCCL we run on, as NCCL encodes versions (NcclVersionCode):
// 2.18, what our wheels require (pyproject.toml). Several processes on one
// GPU need NCCL_HOSTID (NCCL's getHostHash reads it since 2.5.6), which
// this includes.
inline constexpr int kMinNcclMajor = 2, kMinNcclMinor = 18, kMinNcclPatch = 0;

// NCCL's version code: major*10000 + minor*100 + patch from 2.9 on,
// major*1000 + minor*100 + patch before (NCCL_VERSION in nccl.h).
int NcclVersionCode(int major, int minor, int patch);
// "2.18.3" for a code that ncclGetVersion returned.
std::string NcclVersionName(int code);

struct NcclApi {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  // From the CUDA driver (libcuda.so.1, on every machine with an NVIDIA
  // driver; the driver, not a runtime, so no CUDA runtime version matters):
  // a collective permute's rank that no rank sends to gets zeros, as XLA's
  // own collective-permute gives, enqueued on the call's stream.
  decltype(&cuMemsetD8Async) MemsetD8Async = nullptr;
  // And the device's partition-id or replica-id, written as one 32-bit
  // value on the stream (the rewrite's calls of them on GPUs).
  decltype(&cuMemsetD32Async) MemsetD32Async = nullptr;
  // A ragged all-to-all's offsets and sizes, read on the host before its
  // transfers are enqueued (they size them), as XLA's own does: copied on
  // the call's stream, which the host then waits for; and its output copied
  // into the result where the engine gave the two different buffers.
  decltype(&cuMemcpyDtoHAsync) MemcpyDtoHAsync = nullptr;
  decltype(&cuMemcpyDtoDAsync) MemcpyDtoDAsync = nullptr;
  decltype(&cuStreamSynchronize) StreamSynchronize = nullptr;
  // The agreement beside the launch (agreement_gate.h): each device's gate
  // word, page-locked host memory mapped into the devices' address space,
  // and the wait on it that follows a call on its stream.
  decltype(&cuMemHostAlloc) MemHostAlloc = nullptr;
  decltype(&cuMemHostGetDevicePointer) MemHostGetDevicePointer = nullptr;
  decltype(&cuStreamWaitValue32) StreamWaitValue32 = nullptr;
  // The process's NCCL_HOSTID (NCCL's own variable; read with the settings,
  // common/settings.h), named when NCCL refuses two ranks on one GPU.
  std::string host_id;

  // dlopen()s `path` (never closed: NCCL keeps threads) and `driver_path`,
  // resolves every entry point and checks the version (CheckVersion); the
  // error names the library and the missing symbol or the versions.
  static StatusOr<NcclApi> Load(const std::string& path, const std::string& driver_path = "libcuda.so.1");
  // FAILED_PRECONDITION, naming `path`, its version and the minimum, when
  // the library is older than kMinNccl*.
  Status CheckVersion(const std::string& path) const;
  // A Status for an NCCL result, naming the call and, when `waited_s` is
  // given (not negative), how long it took to be reported.
  Status Check(ncclResult_t result, const char* call, double waited_s = -1) const;
};

}  // namespace myplugin::collectives

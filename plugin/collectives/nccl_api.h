// The NCCL entry points we use, resolved from libnccl.so.2 at run time (it
// comes from the nvidia-nccl-cu12 wheel, and only GPU machines need it), or
// filled in by a test with fakes. Types come from NCCL's own header.
#pragma once

#include <nccl.h>

#include <string>

#include "common/status.h"

namespace myplugin::collectives {

struct NcclApi {
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

  // dlopen()s `path` (never closed: NCCL keeps threads) and resolves every
  // entry point; the error names the library and the missing symbol.
  static StatusOr<NcclApi> Load(const std::string& path);
  // A Status for an NCCL result, naming the call.
  Status Check(ncclResult_t result, const char* call) const;
};

}  // namespace myplugin::collectives

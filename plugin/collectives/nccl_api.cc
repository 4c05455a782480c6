#include "collectives/nccl_api.h"

#include <dlfcn.h>

#include "common/deadline.h"

namespace myplugin::collectives {

int NcclVersionCode(int major, int minor, int patch) {
  const bool old_code = major < 2 || (major == 2 && minor <= 8);
  return major * (old_code ? 1000 : 10000) + minor * 100 + patch;
}

std::string NcclVersionName(int code) {
  // Old codes stop at 2.8.x (2899); new ones start at 2.9.0 (20900).
  const int scale = code >= 10000 ? 10000 : 1000;
  return std::to_string(code / scale) + "." + std::to_string(code % scale / 100) + "." + std::to_string(code % 100);
}

Status NcclApi::CheckVersion(const std::string& path) const {
  int code = 0;
  MYPLUGIN_RETURN_IF_ERROR(Check(GetVersion(&code), "ncclGetVersion"));
  const int minimum = NcclVersionCode(kMinNcclMajor, kMinNcclMinor, kMinNcclPatch);
  if (code >= minimum) return OkStatus();
  return FailedPrecondition(path + " is NCCL " + NcclVersionName(code) + "; myplugin needs NCCL " +
                            NcclVersionName(minimum) +
                            " or newer (pip install -U nvidia-nccl-cu13 or nvidia-nccl-cu12, or set "
                            "MYPLUGIN_NCCL_PATH to a newer libnccl.so.2)");
}

StatusOr<NcclApi> NcclApi::Load(const std::string& path, const std::string& driver_path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("cannot load NCCL (" + path + "): " + (why ? why : "unknown error") +
                              " (pip install nvidia-nccl-cu13 or nvidia-nccl-cu12, or set MYPLUGIN_NCCL_PATH)");
  }
  NcclApi api;
  Status missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && missing.ok()) missing = FailedPrecondition(path + " has no " + name + ": not an NCCL 2 library");
  };
  resolve(api.GetVersion, "ncclGetVersion");
  resolve(api.GetUniqueId, "ncclGetUniqueId");
  resolve(api.CommInitRank, "ncclCommInitRank");
  resolve(api.CommDestroy, "ncclCommDestroy");
  resolve(api.CommAbort, "ncclCommAbort");
  resolve(api.CommGetAsyncError, "ncclCommGetAsyncError");
  resolve(api.GetErrorString, "ncclGetErrorString");
  resolve(api.AllReduce, "ncclAllReduce");
  resolve(api.AllGather, "ncclAllGather");
  resolve(api.ReduceScatter, "ncclReduceScatter");
  resolve(api.Send, "ncclSend");
  resolve(api.Recv, "ncclRecv");
  resolve(api.GroupStart, "ncclGroupStart");
  resolve(api.GroupEnd, "ncclGroupEnd");
  if (!missing.ok()) return missing;
  MYPLUGIN_RETURN_IF_ERROR(api.CheckVersion(path));
  void* driver = dlopen(driver_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("cannot load the CUDA driver (" + driver_path + ") for NCCL collectives: " +
                              (why ? why : "unknown error") + " (is an NVIDIA driver installed?)");
  }
  // Each by the symbol cuda.h maps its name to (cuMemcpyDtoHAsync is
  // cuMemcpyDtoHAsync_v2): the one whose signature the pointer's type is.
  Status no_driver;
  auto driver_entry = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(driver, symbol));
    if (fn == nullptr && no_driver.ok()) {
      no_driver = FailedPrecondition(driver_path + " has no " + symbol + ": not a CUDA driver");
    }
  };
#define MYPLUGIN_SYMBOL_TEXT(name) #name
#define MYPLUGIN_SYMBOL(name) MYPLUGIN_SYMBOL_TEXT(name)
  driver_entry(api.MemsetD8Async, MYPLUGIN_SYMBOL(cuMemsetD8Async));
  driver_entry(api.MemsetD32Async, MYPLUGIN_SYMBOL(cuMemsetD32Async));
  driver_entry(api.MemcpyDtoHAsync, MYPLUGIN_SYMBOL(cuMemcpyDtoHAsync));
  driver_entry(api.MemcpyDtoDAsync, MYPLUGIN_SYMBOL(cuMemcpyDtoDAsync));
  driver_entry(api.StreamSynchronize, MYPLUGIN_SYMBOL(cuStreamSynchronize));
  driver_entry(api.MemHostAlloc, MYPLUGIN_SYMBOL(cuMemHostAlloc));
  driver_entry(api.MemHostGetDevicePointer, MYPLUGIN_SYMBOL(cuMemHostGetDevicePointer));
  driver_entry(api.StreamWaitValue32, MYPLUGIN_SYMBOL(cuStreamWaitValue32));
#undef MYPLUGIN_SYMBOL
#undef MYPLUGIN_SYMBOL_TEXT
  if (!no_driver.ok()) return no_driver;
  return api;
}

Status NcclApi::Check(ncclResult_t result, const char* call, double waited_s) const {
  if (result == ncclSuccess) return OkStatus();
  const char* text = GetErrorString ? GetErrorString(result) : "unknown NCCL error";
  Code code = result == ncclInvalidArgument || result == ncclInvalidUsage ? Code::kInvalidArgument : Code::kInternal;
  const std::string after = waited_s >= 0 ? " after " + SecondsText(waited_s) : "";
  return Status(code, std::string(call) + " failed" + after + ": " + text + " (NCCL error " + std::to_string(result) +
                          ")");
}

}  // namespace myplugin::collectives

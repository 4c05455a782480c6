// The host-callback handler on the CUDA engine: operands and results are
// device memory, so they are copied through host staging on the FFI stream.
// The CUDA runtime is dlopen()ed (like NCCL) so that the module builds and
// loads on machines without CUDA.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <memory>
#include <string>

#include "collectives/ffi_common.h"
#include "python/host_callback.h"

namespace ffi = xla::ffi;

namespace myplugin::python {
namespace {

struct CudaRuntime {
  decltype(&cudaMemcpyAsync) MemcpyAsync = nullptr;
  decltype(&cudaStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&cudaGetErrorString) GetErrorString = nullptr;

  Status Check(cudaError_t e, const char* call) const {
    if (e == cudaSuccess) return Status();
    return Internal(std::string(call) + " failed in a Python host callback: " + GetErrorString(e));
  }
};

// Set once, before the handler is registered; never unloaded (the engine may
// call the handler until the process exits).
const CudaRuntime* runtime = nullptr;

StatusOr<CudaRuntime> LoadCudaRuntime(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("cannot load the CUDA runtime (" + path + ") for Python host callbacks: " +
                              (why ? why : "unknown error") + " (pip install nvidia-cuda-runtime-cu12)");
  }
  CudaRuntime rt;
  Status missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && missing.ok()) missing = FailedPrecondition(path + " has no " + name + ": not a CUDA runtime");
  };
  resolve(rt.MemcpyAsync, "cudaMemcpyAsync");
  resolve(rt.StreamSynchronize, "cudaStreamSynchronize");
  resolve(rt.GetErrorString, "cudaGetErrorString");
  if (!missing.ok()) {
    dlclose(handle);
    return missing;
  }
  return rt;
}

class DeviceMemory final : public BufferAccess {
 public:
  DeviceMemory(const CudaRuntime& rt, cudaStream_t stream) : rt_(rt), stream_(stream) {}
  Status ToHost(void* host, const void* buffer, size_t bytes) override {
    return rt_.Check(rt_.MemcpyAsync(host, buffer, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
  }
  Status ToBuffer(void* buffer, const void* host, size_t bytes) override {
    return rt_.Check(rt_.MemcpyAsync(buffer, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  }
  // The host side (Python's arrays) must not change or go away before the
  // stream has done with it.
  Status Wait() override { return rt_.Check(rt_.StreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  const CudaRuntime& rt_;
  cudaStream_t stream_;
};

ffi::Error CudaHostCallbackImpl(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                                uint64_t callback_id) {
  if (runtime == nullptr) {
    return collectives::ToFfi(FailedPrecondition("the CUDA runtime for Python host callbacks was never loaded"));
  }
  DeviceMemory access(*runtime, stream);
  return collectives::ToFfi(RunHostCallback(callback_id, args, rets, access));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginCudaHostCallback, CudaHostCallbackImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<uint64_t>("callback_id"));

StatusOr<void*> CudaHostCallbackHandler(const std::string& cudart_path) {
  if (runtime == nullptr) {
    StatusOr<CudaRuntime> rt = LoadCudaRuntime(cudart_path);
    if (!rt.ok()) return rt.status();
    runtime = new CudaRuntime(rt.take());
  }
  return reinterpret_cast<void*>(MypluginCudaHostCallback);
}

}  // namespace myplugin::python

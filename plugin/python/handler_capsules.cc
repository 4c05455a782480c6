// The XLA FFI handlers that jax_plugin registers with jax
// (jax.ffi.register_ffi_target), handed over as capsules: the collectives'
// (Gloo, and NCCL on the CUDA engine) and the host callbacks', with the
// Python dispatcher that the host-callback handler calls.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "collectives/ffi_handlers.h"
#ifdef MYPLUGIN_HAVE_NCCL
#include "collectives/nccl_ffi_handlers.h"
#endif
#include "pjrt/host_callback_targets.h"
#include "python/bindings.h"
#include "python/buffer_callback.h"
#include "python/host_callback.h"
#include "python/status_exception.h"

namespace nb = nanobind;

namespace myplugin::python {

void BindHandlerCapsules(nb::module_& m) {
  namespace coll = myplugin::collectives;
  m.def("ffi_targets", [] {
    nb::dict out;
    for (const auto& [name, handler] : coll::FfiHandlers()) out[name.c_str()] = nb::capsule(handler);
    return out;
  }, "The collectives' XLA FFI handlers, as capsules for jax.ffi.register_ffi_target.");
  m.def("nccl_ffi_targets", []() -> std::optional<nb::dict> {
#ifdef MYPLUGIN_HAVE_NCCL
    nb::dict out;
    for (const auto& [name, handler] : coll::NcclFfiHandlers()) out[name.c_str()] = nb::capsule(handler);
    return out;
#else
    return std::nullopt;
#endif
  }, "The NCCL handlers for the CUDA engine (None when built without NCCL's headers).");

  m.def("set_host_callback_dispatcher", [](nb::callable fn) {
    SetHostCallbackDispatcher(fn.ptr());
  }, nb::arg("dispatcher"), "Installs the Python function that runs every host callback (by id).");
  m.def("host_callback_targets", [] {
    nb::dict names;
    names["cpu"] = std::string(kHostCallbackTarget);
    names["cuda"] = std::string(kHostCallbackTarget);
    // partitioned=True in a partitioned jit (host engine): jaxlib partitions it.
    names["partitioned"] = std::string(spmd::kPartitionedHostCallbackTarget);
    return names;
  }, "The custom-call target names of Python host callbacks, by engine kind, and 'partitioned' (jax's own "
     "names).");
  m.def("host_callback_target", [] { return nb::capsule(HostCallbackHandler()); },
        "The host engine's XLA FFI handler of Python host callbacks.");
  m.def("set_buffer_callback_dispatcher", [](nb::callable fn) {
    SetBufferCallbackDispatcher(fn.ptr());
  }, nb::arg("dispatcher"), "Installs the Python function that runs every buffer callback (by id).");
  m.def("buffer_callback_target", [] {
    return nb::make_tuple(std::string(kBufferCallbackTarget), nb::capsule(BufferCallbackHandler()));
  }, "(target name, handler): the host engine's XLA FFI handler of jax.experimental.buffer_callback.");
  m.def("cuda_host_callback_target", [](const std::string& cudart_path) -> std::optional<nb::capsule> {
#ifdef MYPLUGIN_HAVE_CUDA_HEADERS
    return nb::capsule(ValueOrThrow(CudaHostCallbackHandler(cudart_path)));
#else
    return std::nullopt;
#endif
  }, nb::arg("cudart_path"),
     "The CUDA engine's handler, which copies through the CUDA runtime at cudart_path (None when built without "
     "the CUDA headers).");
}

}  // namespace myplugin::python

// Python host callbacks (jax.pure_callback, io_callback, jax.debug.*) inside
// programs compiled by the engine. jax_plugin lowers them to a typed-FFI
// custom call (under jax's target name) whose attribute `callback_id` names a
// callable that jax_plugin keeps (jax_plugin/callbacks.py); this handler hands
// the operands to Python's dispatcher and copies the results back.
#pragma once

#include <Python.h>

#include <cstddef>
#include <string>

#include "common/status.h"
#include "xla/ffi/api/ffi.h"

namespace myplugin::python {

// The Python function every callback goes through:
// dispatcher(callback_id: int, args: tuple[bytearray | None, ...]) -> sequence
// of C-contiguous buffers, one per non-token result, each exactly the size of
// that result. Called with the GIL held; replaces the previous one.
void SetHostCallbackDispatcher(PyObject* dispatcher);

// How the handler reaches the program's buffers: directly on the host engine,
// through copies on the FFI stream on the CUDA one.
class BufferAccess {
 public:
  virtual ~BufferAccess() = default;
  virtual Status ToHost(void* host, const void* buffer, size_t bytes) = 0;
  virtual Status ToBuffer(void* buffer, const void* host, size_t bytes) = 0;
  // Waits until every copy issued so far is complete.
  virtual Status Wait() = 0;
};

// One call of callback `callback_id`: the operands (tokens as None) go to
// the dispatcher, its results into `rets`. Takes the GIL.
Status RunHostCallback(uint64_t callback_id, xla::ffi::RemainingArgs args, xla::ffi::RemainingRets rets,
                       BufferAccess& access);

// The handler for the host engine (buffers are host memory).
void* HostCallbackHandler();

#ifdef MYPLUGIN_HAVE_CUDA_HEADERS
// The handler for the CUDA engine: device buffers, copied on the FFI stream
// through the CUDA runtime at `cudart_path` (dlopen()ed here; the error names
// the library and what is missing).
StatusOr<void*> CudaHostCallbackHandler(const std::string& cudart_path);
#endif

}  // namespace myplugin::python

// jax.experimental.buffer_callback inside programs the host engine compiles.
// jax builds it only for its cpu, cuda and rocm backends, whose handler finds
// the callable in execute-context data a plugin's client never gets. So
// jax_plugin lowers it for myplugin to a typed-FFI call of this handler,
// whose attribute `callback_id` names a callable jax_plugin keeps
// (jax_plugin/buffer_callbacks.py). The handler hands Python each operand's
// and result's memory in place (address, element type, dimensions): the
// callback reads its inputs and writes its results there, as on jax's CPU
// backend.
#pragma once

#include <Python.h>

namespace myplugin::python {

// The custom-call target the lowering names and the handler is registered
// under in the engine (ours: the call's attributes are not jaxlib's).
inline constexpr const char* kBufferCallbackTarget = "myplugin_buffer_callback";

// dispatcher(callback_id: int, operands: tuple, results: tuple) -> None, each
// element (address: int, dtype: str, dims: tuple[int, ...]); called with the
// GIL held. Replaces the previous one.
void SetBufferCallbackDispatcher(PyObject* dispatcher);

// The host engine's handler (its buffers are host memory).
void* BufferCallbackHandler();

}  // namespace myplugin::python

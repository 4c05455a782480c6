#include "python/pjrt_capsule.h"

#include <Python.h>

namespace nb = nanobind;

namespace myplugin::python {

const PJRT_Api* ApiFromCapsule(nb::handle capsule) {
  void* p = PyCapsule_GetPointer(capsule.ptr(), "pjrt_c_api");
  if (p == nullptr) {
    PyErr_Clear();
    throw nb::type_error("expected the 'pjrt_c_api' capsule that jax's register_plugin returns");
  }
  return static_cast<const PJRT_Api*>(p);
}

std::string TakeError(const PJRT_Api* api, PJRT_Error* error) {
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  return text;
}

}  // namespace myplugin::python

// Our PJRT_Api as the Python module reaches it: through the 'pjrt_c_api'
// capsule that jax's register_plugin returns, never by linking to the PJRT
// library.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "pjrt_c_api.h"

namespace myplugin::python {

// The PJRT_Api inside jax's capsule; TypeError for anything else.
const PJRT_Api* ApiFromCapsule(nanobind::handle capsule);

// The error's message; destroys the error.
std::string TakeError(const PJRT_Api* api, PJRT_Error* error);

}  // namespace myplugin::python

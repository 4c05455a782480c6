// The custom-call handler that jax_plugin installs for platform "myplugin":
// jax hands it every FFI target registered for the platform, and it passes
// each to the engine through our PJRT_Api's FFI extension. It reaches the
// engine only through that capsule, never by linking to the PJRT library.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>

#include "engine/ffi_api_version.h"
#include "pjrt/ffi_extension.h"
#include "pjrt_c_api.h"
#include "python/bindings.h"
#include "python/pjrt_capsule.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

void* HandlerFromPython(const std::string& name, nb::handle fn) {
  nb::handle capsule = fn;
  if (PyDict_Check(fn.ptr())) {
    // {stage: capsule}: the engine's FFI extension takes one execute handler.
    PyObject* execute = PyDict_GetItemString(fn.ptr(), "execute");
    if (execute == nullptr || PyDict_Size(fn.ptr()) != 1) {
      throw nb::value_error(("FFI target '" + name +
                             "' has stages other than 'execute'; myplugin's engine registers "
                             "single-stage handlers only")
                                .c_str());
    }
    capsule = execute;
  }
  if (!PyCapsule_CheckExact(capsule.ptr())) {
    throw nb::type_error(("FFI target '" + name + "': expected a PyCapsule holding an XLA_FFI_Handler").c_str());
  }
  void* handler = PyCapsule_GetPointer(capsule.ptr(), PyCapsule_GetName(capsule.ptr()));
  if (handler == nullptr) throw nb::python_error();
  return handler;
}

// Signature of jax's custom-call handlers: (name, fn, platform, api_version, traits).
void RegisterCustomCallTarget(nb::handle c_api, const std::string& name, nb::handle fn,
                              const std::string& platform, int api_version, unsigned traits) {
  if (api_version != 1) {
    throw nb::value_error(("custom call target '" + name +
                           "' uses the untyped custom-call API (api_version=" + std::to_string(api_version) +
                           "); myplugin runs typed XLA FFI handlers (api_version=1) only")
                              .c_str());
  }
  const PJRT_Api* api = ApiFromCapsule(c_api);
  const FfiExtension* ffi = nullptr;
  for (PJRT_Extension_Base* ext = api->extension_start; ext != nullptr; ext = ext->next) {
    if (ext->type == PJRT_Extension_Type_FFI) ffi = reinterpret_cast<const FfiExtension*>(ext);
  }
  if (ffi == nullptr) throw std::runtime_error("this PJRT plugin has no FFI extension");
  FfiRegisterHandlerArgs args{};
  args.struct_size = kFfiRegisterHandlerArgsSize;
  args.target_name = name.data();
  args.target_name_size = name.size();
  args.handler = HandlerFromPython(name, fn);
  args.platform_name = platform.data();
  args.platform_name_size = platform.size();
  args.traits = traits;
  if (PJRT_Error* error = ffi->register_handler(&args)) {
    throw std::runtime_error("registering FFI target '" + name + "' on myplugin failed: " + TakeError(api, error));
  }
}

std::string HandlerVersion(const std::string& name, nb::handle fn) {
  StatusOr<FfiApiVersion> version = HandlerFfiApiVersion(HandlerFromPython(name, fn), RunningEngineFfi().api);
  if (!version.ok()) throw std::runtime_error("FFI target '" + name + "': " + version.status().message());
  return version.value().ToString();
}

std::optional<std::string> EngineVersion() {
  ProbedEngineFfi engine = RunningEngineFfi();
  if (!engine.known) return std::nullopt;
  return engine.version.ToString();
}

std::vector<std::tuple<std::string, std::string, bool, std::string>> CompatiblePairs() {
  std::vector<std::tuple<std::string, std::string, bool, std::string>> out;
  for (const FfiCompatiblePair& pair : FfiCompatiblePairs()) {
    out.emplace_back(pair.handler.ToString(), pair.engine.ToString(), pair.adapted, pair.reason);
  }
  return out;
}

}  // namespace

void BindFfiRegistration(nb::module_& m) {
  m.def("register_custom_call_target", &RegisterCustomCallTarget, nb::arg("c_api"), nb::arg("name"),
        nb::arg("fn"), nb::arg("platform"), nb::arg("api_version") = 1, nb::arg("traits") = 0,
        "Registers a typed XLA FFI handler with the engine behind a myplugin PJRT_Api capsule.");
  m.def("handler_ffi_api_version", &HandlerVersion, nb::arg("name"), nb::arg("fn"),
        "The XLA FFI API version ('0.5') a handler capsule (or {'execute': capsule}) was built against.");
  m.def("engine_ffi_api_version", &EngineVersion,
        "The XLA FFI API version the engine speaks, read when the first handler was registered; None before.");
  m.def("built_ffi_api_version", [] { return BuiltFfiApiVersion().ToString(); },
        "The XLA FFI API version of this build's own handlers.");
  m.def("ffi_compatible_pairs", &CompatiblePairs,
        "Every (handler version, engine version, adapted, reason) that myplugin registers.");
}

}  // namespace myplugin::python

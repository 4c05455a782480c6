// Errors as jax_plugin.errors' classes: every StatusError becomes the
// exception that jax_plugin.errors makes from the status's code and failure
// fields, once it has handed us its factory; the failure a running program's
// collectives last reported, for errors that jaxlib raised.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "collectives/failure_record.h"
#include "common/printable.h"
#include "python/bindings.h"
#include "python/status_exception.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

// jax_plugin.errors' factory: (code, text, kind, processes, collective, call)
// -> exception. Held for the life of the interpreter (a module's global).
PyObject* factory = nullptr;

nb::object Fields(const Status& st) {
  const FailureDetail none;
  const FailureDetail& f = st.failure() ? *st.failure() : none;
  return nb::make_tuple(CodeName(st.code()), std::string(CodeName(st.code())) + ": " + PrintableUtf8(st.message()),
                        f.kind, f.processes, f.collective, f.call);
}

void Raise(const StatusError& e) {
  if (factory != nullptr) {
    try {
      nb::object exc = nb::borrow(factory)(*Fields(e.status()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      return;
    } catch (nb::python_error& failed) {
      failed.discard_as_unraisable("jax_plugin.errors' factory");
    }
  }
  PyErr_SetString(PyExc_RuntimeError, e.what());
}

}  // namespace

void BindErrors(nb::module_& m) {
  nb::enum_<FailureKind>(m, "FailureKind")
      .value("none", FailureKind::kNone)
      .value("peer_failure", FailureKind::kPeerFailure)
      .value("timeout", FailureKind::kTimeout)
      .value("mismatch", FailureKind::kMismatch)
      .value("coordination", FailureKind::kCoordination);
  m.def("set_error_factory", [](nb::object f) {
    Py_XDECREF(factory);
    factory = f.release().ptr();
  }, nb::arg("factory"));
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      Raise(e);
    }
  });
  // (code, text, kind, processes, collective, call) of the failure last
  // reported to a running program (collectives/failure_record.h), or None;
  // taken: the next call returns None until another is reported.
  m.def("take_collective_failure", []() -> nb::object {
    std::optional<Status> st = collectives::TakeFailure();
    return st ? Fields(*st) : nb::none();
  });
  m.def("forget_collective_failure", [] { collectives::ForgetFailure(); });
}

}  // namespace myplugin::python

// The Python extension module _myplugin: one binding file per subsystem
// (python/bindings.h lists them). It reaches the engine only through our
// PJRT_Api (the capsule that register_plugin returns), never by linking to
// the plugin library; the runtime it shares with that library is
// libmyplugin_runtime.
#include <nanobind/nanobind.h>

#include "pjrt_c_api.h"
#include "python/bindings.h"

namespace nb = nanobind;

NB_MODULE(_myplugin, m) {
  namespace py = myplugin::python;
  m.doc() = "myplugin native helpers";
  m.attr("PJRT_API_VERSION") = nb::make_tuple(PJRT_API_MAJOR, PJRT_API_MINOR);
  py::BindErrors(m);
  py::BindFfiRegistration(m);
  py::BindCoordination(m);
  py::BindService(m);
  py::BindStraggler(m);
  py::BindCollectives(m);
  py::BindCollectiveTable(m);
  py::BindHandlerCapsules(m);
  py::BindCompileHooks(m);
  py::BindDefaults(m);
  py::BindLibraryChoice(m);
  py::BindDlpackExport(m);
}

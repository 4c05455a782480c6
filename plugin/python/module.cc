// The Python extension module _myplugin: one binding file per subsystem
// (python/bindings.h lists them). It reaches the engine only through our
// PJRT_Api (the capsule that register_plugin returns), never by linking to
// the plugin library; the runtime it shares with that library is
// libmyplugin_runtime.
#include <Python.h>
#include <nanobind/nanobind.h>

#include "common/gil_aware_mutex.h"
#include "pjrt_c_api.h"
#include "python/bindings.h"

namespace nb = nanobind;

namespace {

void* SaveThread() { return PyEval_SaveThread(); }
void RestoreThread(void* state) { PyEval_RestoreThread(static_cast<PyThreadState*>(state)); }

}  // namespace

NB_MODULE(_myplugin, m) {
  namespace py = myplugin::python;
  m.doc() = "myplugin native helpers";
  m.attr("PJRT_API_VERSION") = nb::make_tuple(PJRT_API_MAJOR, PJRT_API_MINOR);
  // How a thread of the runtime's that holds the GIL waits for a lock whose
  // holder may need the GIL (common/gil_aware_mutex.h).
  myplugin::GilAwareMutex::InstallGil({&PyGILState_Check, &SaveThread, &RestoreThread});
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

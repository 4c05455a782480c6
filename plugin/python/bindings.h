// The parts of the Python module _myplugin, one file each (module.cc puts
// them together). Each adds its functions and constants to the module.
#pragma once

#include <nanobind/nanobind.h>

namespace myplugin::python {

// register_custom_call_target: jax's custom-call handler for "myplugin".
void BindFfiRegistration(nanobind::module_& m);
// The FFI handlers jax_plugin registers, as capsules (collectives, host callbacks).
void BindHandlerCapsules(nanobind::module_& m);
// The collectives run on numpy buffers (jax_plugin.collectives).
void BindCollectives(nanobind::module_& m);
// collective_table: the custom-call targets of compiled programs and their attributes.
void BindCollectiveTable(nanobind::module_& m);
// This process's membership of a job: join, leave, topology, KV store, barriers.
void BindCoordination(nanobind::module_& m);
// The coordination service, for the launcher, the CLI and process 0.
void BindService(nanobind::module_& m);
// The straggler watch and the flight recorder.
void BindStraggler(nanobind::module_& m);
// The Python steps the PJRT library's compile calls back into.
void BindCompileHooks(nanobind::module_& m);
// DEFAULTS: the defaults C++ defines, for jax_plugin to read.
void BindDefaults(nanobind::module_& m);
// Errors as jax_plugin.errors' classes; the failure a running program's collectives reported.
void BindErrors(nanobind::module_& m);
// buffer_to_dlpack: DLPack export of myplugin arrays.
void BindDlpackExport(nanobind::module_& m);
// set_library_choice: the engine, shadow engine and NCCL library to load.
void BindLibraryChoice(nanobind::module_& m);

}  // namespace myplugin::python

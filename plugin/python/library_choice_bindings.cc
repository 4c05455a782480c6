// set_library_choice: jax_plugin's choice of the engine, the shadow engine
// and the NCCL library, handed to the PJRT library and the collectives
// (engine/library_choice.h) before the plugin is registered with jax.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "engine/library_choice.h"
#include "collectives/process_runtime.h"
#include "python/bindings.h"

namespace nb = nanobind;

namespace myplugin::python {

void BindLibraryChoice(nb::module_& m) {
  m.def("set_library_choice",
        [](const std::string& engine_path, const std::string& engine_kind, const std::string& shadow_engine_path,
           const std::string& nccl_library, const std::string& compile_engine_path) {
          if (engine_kind != "cpu" && engine_kind != "cuda") {
            throw nb::value_error(("engine_kind must be 'cpu' or 'cuda', got '" + engine_kind + "'").c_str());
          }
          collectives::ProcessRuntime::Get().SetLibraryChoice(LibraryChoice{engine_path, engine_kind, shadow_engine_path, nccl_library, compile_engine_path});
        },
        nb::arg("engine_path"), nb::arg("engine_kind"), nb::arg("shadow_engine_path"), nb::arg("nccl_library"),
        nb::arg("compile_engine_path") = "",
        "Which engine (and of which kind), shadow engine, libnccl and GPU compile engine this process loads ('' for "
        "none or the system's); call before the plugin is registered.");
  m.def("library_choice", [] {
    LibraryChoice c = collectives::ProcessRuntime::Get().library_choice();
    nb::dict d;
    d["engine_path"] = c.engine_path;
    d["engine_kind"] = c.engine_kind;
    d["shadow_engine_path"] = c.shadow_engine_path;
    d["nccl_library"] = c.nccl_library;
    d["compile_engine_path"] = c.compile_engine_path;
    return d;
  }, "The choice the PJRT library and the collectives read.");
}

}  // namespace myplugin::python

// The Python steps that the PJRT library's compile calls back into: the
// multi-process compile's (jax_plugin/spmd/compile_hooks.py) and the cost
// analysis (jax_plugin/cost_analysis.py). jaxlib runs PJRT_Client_Compile
// without the GIL, so each hook takes it. A Python exception becomes the
// compile's error; an instance of the class handed over as `unsupported`
// (jax_plugin's UnsupportedProgram: a construct we cannot run across
// processes) is reported as UNIMPLEMENTED.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "python/bindings.h"
#include "spmd/cost_analysis_hook.h"
#include "spmd/jaxlib_partitioned_targets.h"
#include "spmd/program_hooks.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

namespace spmd = myplugin::spmd;

// Called with the GIL held. `unsupported`: the exception class whose
// instances (subclasses' too) are UNIMPLEMENTED; null for none.
Status FromPythonError(nb::python_error& e, const char* step, nb::handle unsupported = nb::handle()) {
  std::string message = nb::cast<std::string>(nb::str(e.value()));
  auto code = unsupported.is_valid() && e.matches(unsupported) ? Code::kUnimplemented : Code::kInternal;
  return Status(code, std::string(step) + ": " + message);
}

// A Python object a hook holds: shared, released with the GIL held (a hook
// may be replaced or dropped from any thread).
std::shared_ptr<nb::object> Keep(nb::object fn) {
  return std::shared_ptr<nb::object>(new nb::object(std::move(fn)), [](nb::object* o) {
    nb::gil_scoped_acquire gil;
    delete o;
  });
}

void SetProgramHooks(nb::callable shadow_program, nb::callable local_program, nb::type_object unsupported) {
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(unsupported.ptr()),
                        reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) {
    throw nb::type_error("set_program_hooks: 'unsupported' must be an exception class");
  }
  auto shadow_fn = Keep(std::move(shadow_program));
  auto local_fn = Keep(std::move(local_program));
  auto unsupported_cls = Keep(std::move(unsupported));
  spmd::ProgramHooks hooks;
  hooks.shadow_program = [shadow_fn, unsupported_cls](const std::string& code, const std::string& format,
                                                      const std::string& options, const std::string& dump_dir,
                                                      bool stop_early) -> StatusOr<spmd::ShadowProgram> {
    nb::gil_scoped_acquire gil;
    try {
      nb::object out = (*shadow_fn)(nb::bytes(code.data(), code.size()), format,
                                    nb::bytes(options.data(), options.size()), dump_dir, stop_early);
      auto t = nb::cast<std::tuple<nb::bytes, nb::bytes, bool, bool>>(out);
      spmd::ShadowProgram p;
      p.code.assign(std::get<0>(t).c_str(), std::get<0>(t).size());
      p.compile_options.assign(std::get<1>(t).c_str(), std::get<1>(t).size());
      p.stops_early = std::get<2>(t);
      p.partitioned = std::get<3>(t);
      return p;
    } catch (nb::python_error& e) {
      return FromPythonError(e, "preparing the partition step", *unsupported_cls);
    }
  };
  hooks.local_program = [local_fn, unsupported_cls](const spmd::LocalProgramRequest& r)
      -> StatusOr<spmd::LocalProgram> {
    nb::gil_scoped_acquire gil;
    try {
      nb::object out = (*local_fn)(r.dump_dir, nb::bytes(r.compile_options.data(), r.compile_options.size()),
                                   r.assignment, r.num_devices, r.local_engine_ids, r.engine_kind);
      auto t = nb::cast<std::tuple<nb::bytes, nb::bytes, std::vector<int64_t>, bool, nb::bytes>>(out);
      spmd::LocalProgram p;
      p.hlo_module_proto.assign(std::get<0>(t).c_str(), std::get<0>(t).size());
      p.compile_options.assign(std::get<1>(t).c_str(), std::get<1>(t).size());
      p.device_order = std::get<2>(t);
      p.process_independent = std::get<3>(t);
      p.partitioned_module_proto.assign(std::get<4>(t).c_str(), std::get<4>(t).size());
      return p;
    } catch (nb::python_error& e) {
      return FromPythonError(e, "rewriting the partitioned program", *unsupported_cls);
    } catch (std::exception& e) {
      return Internal(std::string("rewriting the partitioned program: ") + e.what());
    }
  };
  spmd::SetProgramHooks(std::move(hooks));
}

void SetCostAnalysisHook(nb::callable analyze) {
  auto fn = Keep(std::move(analyze));
  spmd::SetCostAnalysisHook([fn](const std::string& module) -> StatusOr<spmd::CostProperties> {
    nb::gil_scoped_acquire gil;
    try {
      nb::object out = (*fn)(nb::bytes(module.data(), module.size()));
      spmd::CostProperties props;
      for (auto [name, value] : nb::cast<nb::dict>(out)) {
        props.emplace_back(nb::cast<std::string>(name), nb::cast<double>(value));
      }
      return props;
    } catch (nb::python_error& e) {
      // jax reads UNIMPLEMENTED as "no cost analysis" (None), anything else as a failure.
      if (e.matches(PyExc_NotImplementedError)) {
        return Unimplemented("cost analysis: " + nb::cast<std::string>(nb::str(e.value())));
      }
      return FromPythonError(e, "cost analysis");
    } catch (std::exception& e) {
      return Internal(std::string("cost analysis: ") + e.what());
    }
  });
}

}  // namespace

void BindCompileHooks(nb::module_& m) {
  m.def("set_program_hooks", &SetProgramHooks, nb::arg("shadow_program"), nb::arg("local_program"),
        nb::arg("unsupported"),
        "Installs the Python steps of the multi-process compile; an exception of class `unsupported` becomes "
        "UNIMPLEMENTED.");
  m.def("jaxlib_partitioned_targets", [] {
    nb::list names;
    for (const std::string& name : spmd::JaxlibPartitionedTargets()) names.append(name);
    return names;
  }, "The custom-call targets whose partitioning rules only jaxlib's own XLA knows (it partitions their programs): "
     "custom partitioning's, sharding inspection's, partitioned host callbacks' and every batch-partitionable one "
     "registered so far.");
  m.def("shadow_stop_target", [] { return std::string(spmd::kShadowStopTarget); },
        "The custom-call target of the mark that ends the shadow's compile after its HLO passes.");
  m.def("set_cost_analysis_hook", &SetCostAnalysisHook, nb::arg("analyze"),
        "Installs XLA's cost analysis of a serialized HloModuleProto (-> {property: value}).");
}

}  // namespace myplugin::python

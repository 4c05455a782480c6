// The straggler watch and the flight recorder (jax_plugin.straggler): the
// watch's threads are C++; Python gives them the signal and file through
// which faulthandler writes the Python stacks.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"
#include "collectives/straggler_watch.h"
#include "python/bindings.h"
#include "python/status_exception.h"
#include "python/without_gil.h"

namespace nb = nanobind;

namespace myplugin::python {

void BindStraggler(nb::module_& m) {
  namespace coll = myplugin::collectives;
  m.def("straggler_watch_start", [](int stack_signal, int stack_fd, int os_pid, const std::string& host) {
    coll::WatchOptions o{stack_signal, stack_fd, os_pid, host};
    ThrowIfError(WithoutGil([&] { return coll::StartWatch(o); }));
  }, nb::arg("stack_signal"), nb::arg("stack_fd"), nb::arg("os_pid"), nb::arg("host"));
  // Where a job is joined, before the process joins (jax_plugin.straggler.check_settings):
  // the settings, read and checked once for the process.
  m.def("settings_load", [] { ThrowIfError(coll::ProcessRuntime::Get().LoadSettings().status()); });
  m.def("flight_recorder_dump", [](const std::string& reason) {
    return WithoutGil([&] { return coll::DumpFlightRecorder(reason); });
  });
  // A barrier that runs in Python (jax's distributed client builds barriers
  // of some processes on the key-value store): begin, then end once, with
  // ok = false writing the recorders.
  m.def("flight_recorder_barrier_begin", [](const std::string& name, const std::vector<int>& members) {
    return coll::RecordedBarrier::Begin(name, members);
  }, nb::arg("name"), nb::arg("members"));
  m.def("flight_recorder_barrier_end", [](uint64_t id, bool ok, const std::string& why) {
    WithoutGil([&] { coll::RecordedBarrier::End(id, ok, why); });  // a failure writes the recorder
  }, nb::arg("id"), nb::arg("ok"), nb::arg("why") = "");
}

}  // namespace myplugin::python

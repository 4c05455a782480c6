// The coordination service as a Python object, for the launcher, the
// standalone CLI and process 0 of a job, with the protocol's limits.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "common/printable.h"
#include "coordination/limits.h"
#include "coordination/service.h"
#include "coordination/service_state.h"
#include "coordination/wire.h"
#include "python/bindings.h"
#include "python/status_exception.h"
#include "python/without_gil.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

namespace coord = myplugin::coordination;

nb::dict Limits() {
  nb::dict limits;
  limits["max_frame_bytes"] = coord::kMaxFrameBytes;
  limits["max_hello_bytes"] = coord::kMaxHelloBytes;
  limits["max_key_bytes"] = coord::kMaxKeyBytes;
  limits["max_value_bytes"] = coord::kMaxValueBytes;
  limits["max_store_bytes"] = coord::kMaxStoreBytes;
  limits["max_waiting"] = coord::kMaxWaiting;
  limits["max_waiting_per_process"] = coord::kMaxWaitingPerProcess;
  limits["max_topology_bytes"] = coord::kMaxTopologyBytes;
  limits["max_send_queue_bytes"] = coord::kMaxSendQueueBytes;
  limits["default_max_connections"] = coord::kDefaultMaxConnections;
  limits["max_io_threads"] = coord::kMaxIoThreads;
  return limits;
}

}  // namespace

void BindService(nb::module_& m) {
  nb::class_<coord::CoordinationService>(m, "CoordinationService",
                                         "A coordination service, for launchers and the standalone CLI.")
      .def_static(
          "start",
          [](const std::string& bind_host, int port, int num_processes, const std::string& token,
             double heartbeat_timeout, double initialization_timeout, int max_connections, int io_threads) {
            coord::ServiceOptions o;
            o.num_processes = num_processes;
            o.token = token;
            o.heartbeat_timeout_s = heartbeat_timeout;
            o.initialization_timeout_s = initialization_timeout;
            o.max_connections = max_connections;
            o.io_threads = io_threads;
            return ValueOrThrow(coord::CoordinationService::Start(bind_host, port, o));
          },
          nb::arg("bind_host"), nb::arg("port"), nb::arg("num_processes"), nb::arg("token"),
          nb::arg("heartbeat_timeout"), nb::arg("initialization_timeout"),
          nb::arg("max_connections") = 0, nb::arg("io_threads") = 0)
      .def_prop_ro("port", &coord::CoordinationService::port)
      .def("connections", &coord::CoordinationService::connections)
      .def("refused_connections", &coord::CoordinationService::refused_connections)
      .def("stop", &coord::CoordinationService::Stop, nb::call_guard<nb::gil_scoped_release>())
      .def("failure",
           [](coord::CoordinationService& s) -> std::optional<std::string> {
             auto f = s.failure();
             if (!f) return std::nullopt;
             return PrintableUtf8(f->message());
           })
      .def("failed_process",
           [](coord::CoordinationService& s) -> std::optional<int> {
             int p = s.failed_process();
             if (p < 0) return std::nullopt;
             return p;
           })
      .def("failure_self_reported", &coord::CoordinationService::failure_self_reported,
           "The failed process reported its failure itself (it is exiting on its own, not dead or frozen).")
      .def("all_departed", &coord::CoordinationService::all_departed)
      .def("recoverable", &coord::CoordinationService::recoverable)
      .def("epoch", &coord::CoordinationService::epoch)
      .def("process_ended", &coord::CoordinationService::ProcessEnded, nb::arg("process_id"), nb::arg("how"),
           nb::call_guard<nb::gil_scoped_release>(),
           "The launcher saw the process end (how: its exit status): it is failed, and its id is free for a new "
           "process at once.")
      .def("failures_per_process", &coord::CoordinationService::failures_per_process,
           "How many times each process id was declared failed in this attempt (the launcher ends a process "
           "failed while still running).")
      .def("expect_rejoin", &coord::CoordinationService::ExpectRejoin, nb::arg("process_id"), nb::arg("expected"),
           "The launcher started the process again: the next membership agreement waits for it to register.")
      .def(
          "restart",
          [](coord::CoordinationService& s, const std::string& token, int num_processes) {
            ThrowIfError(WithoutGil([&] { return s.Restart(token, num_processes); }));
          },
          nb::arg("token"), nb::arg("num_processes"),
          "Begins the job's next attempt: a fresh state for num_processes processes presenting token.")
      .def_prop_ro("attempt", &coord::CoordinationService::attempt);

  m.attr("PROTOCOL_VERSION") = coord::kProtocolVersion;
  m.attr("COORDINATION_LIMITS") = Limits();
  m.def("coordination_send_progress_timeout", &coord::ServiceState::SendProgressTimeoutSeconds,
        nb::arg("heartbeat_timeout"),
        "Seconds a member may take no bytes from the service before it is declared failed.");
}

}  // namespace myplugin::python

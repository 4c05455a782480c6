// This process's membership of a job (jax_plugin.distributed): join and
// leave, the global topology, the job's failure, the key-value store and
// barriers. Every call that waits on the network runs without the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/flight_recorder.h"
#include "coordination/sigterm_notice.h"
#include "collectives/process_runtime.h"
#include "common/exit_guard.h"
#include "common/fault_delays.h"
#include "common/printable.h"
#include "coordination/sigterm_notice.h"
#include "coordination/runtime.h"
#include "python/bindings.h"
#include "python/status_exception.h"
#include "python/without_gil.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

namespace coord = myplugin::coordination;
using myplugin::collectives::RecordedBarrier;

std::shared_ptr<coord::CoordinationClient> Client() {
  auto client = collectives::ProcessRuntime::Get().distributed().client();
  if (!client) {
    throw StatusError(FailedPrecondition("myplugin's distributed runtime is not initialized "
                                         "(call jax_plugin.distributed.initialize() first)"));
  }
  return client;
}

std::string Str(const nb::bytes& b) { return std::string(b.c_str(), b.size()); }
nb::bytes Bytes(const std::string& s) { return nb::bytes(s.data(), s.size()); }

void Initialize(std::vector<std::string> addresses, int num_processes, int process_id, const std::string& token,
                double initialization_timeout, bool fate_sharing, const std::string& hostname, int num_devices,
                const std::string& device_kind, int os_pid, const std::string& advertise_address,
                const std::string& network_interface) {
  coord::RuntimeOptions o;
  o.coordinator_addresses = std::move(addresses);
  o.num_processes = num_processes;
  o.process_id = process_id;
  o.token = token;
  o.initialization_timeout_s = initialization_timeout;
  o.fate_sharing = fate_sharing;
  o.local.hostname = hostname;
  o.local.num_devices = num_devices;
  o.local.device_kind = device_kind;
  o.local.pid = os_pid;
  o.advertise_address = advertise_address;
  o.network_interface = network_interface;
  ThrowIfError(WithoutGil([&] { return collectives::ProcessRuntime::Get().distributed().Initialize(o); }));
}

nb::list GlobalProcesses() {
  nb::list out;
  for (const auto& p : collectives::ProcessRuntime::Get().distributed().processes()) {
    nb::dict d;
    d["hostname"] = p.hostname;
    d["num_devices"] = p.num_devices;
    d["device_kind"] = p.device_kind;
    d["pid"] = p.pid;
    d["address"] = p.address;
    d["host_id"] = p.host_id;
    out.append(d);
  }
  return out;
}

void BindMembership(nb::module_& m) {
  m.def("distributed_initialize", &Initialize, nb::arg("addresses"), nb::arg("num_processes"),
        nb::arg("process_id"), nb::arg("token"), nb::arg("initialization_timeout"), nb::arg("fate_sharing"),
        nb::arg("hostname"), nb::arg("num_devices"), nb::arg("device_kind"), nb::arg("os_pid"),
        nb::arg("advertise_address") = "", nb::arg("network_interface") = "");
  m.def("distributed_shutdown", [](double timeout) {
    ThrowIfError(WithoutGil([&] {
      RecordedBarrier recorded("the shutdown barrier");
      Status st = collectives::ProcessRuntime::Get().ShutdownJob(timeout);
      if (!st.ok()) recorded.Fail(st.message());
      return st;
    }));
  });
  m.def("distributed_is_initialized", [] { return collectives::ProcessRuntime::Get().distributed().initialized(); });
  m.def("process_id", [] { return collectives::ProcessRuntime::Get().distributed().process_id(); });
  m.def("num_processes", [] { return collectives::ProcessRuntime::Get().distributed().num_processes(); });
  m.def("global_processes", &GlobalProcesses);
  m.def("member_ids", [] { return collectives::ProcessRuntime::Get().distributed().member_ids(); });
  m.def("member_incarnations", [] { return collectives::ProcessRuntime::Get().distributed().member_incarnations(); });
  m.def("epoch", [] { return collectives::ProcessRuntime::Get().distributed().epoch(); });
  m.def("distributed_agree", [](double timeout) {
    ThrowIfError(WithoutGil([&] {
      RecordedBarrier recorded("the membership agreement");
      StatusOr<coord::msg::Membership> verdict = collectives::ProcessRuntime::Get().AgreeMembership(timeout);
      if (!verdict.ok()) recorded.Fail(verdict.status().message());
      return verdict.status();
    }));
  });
  m.def("failure", []() -> std::optional<std::string> {
    auto client = collectives::ProcessRuntime::Get().distributed().client();
    if (!client) return std::nullopt;
    auto f = client->failure();
    if (!f) return std::nullopt;
    return PrintableUtf8(f->message());
  });
  // jax_plugin/preemption.py's SIGTERM, heard at once (coordination/sigterm_notice.h):
  // `key` set to `value` in the service, unless the job has failed, with no GIL.
  m.def("install_sigterm_notice", [](nb::bytes key, nb::bytes value) {
    ThrowIfError(coord::InstallSigtermNotice([k = Str(key), v = Str(value)] {
      auto client = collectives::ProcessRuntime::Get().distributed().client();
      if (!client || client->failure()) return;
      (void)client->KeyValueInsert(k, v);  // ALREADY_EXISTS: another process noticed first
    }));
  });
  m.def("report_error", [](const std::string& reason) {
    auto client = collectives::ProcessRuntime::Get().distributed().client();
    if (!client) return;
    WithoutGil([&] { client->ReportError(reason); });
  });
  m.attr("FATE_SHARING_EXIT_CODE") = coord::kFateSharingExitCode;
  m.attr("EXIT_GUARD_SECONDS") = static_cast<double>(myplugin::kExitGuardLimit.count());
  // Tests widen the error path's races with these (common/fault_delays.h).
  nb::enum_<FaultPoint>(m, "FaultPoint")
      .value("failure_notice", FaultPoint::kFailureNotice)
      .value("signature_sent", FaultPoint::kSignatureSent)
      .value("peer_exit_grace", FaultPoint::kPeerExitGrace);
  m.def("set_fault_delay", &SetFaultDelay, nb::arg("point"), nb::arg("seconds"));
}

void BindKeyValueStore(nb::module_& m) {
  m.def("kv_set", [](nb::bytes key, nb::bytes value) {
    auto c = Client();
    std::string k = Str(key), v = Str(value);
    ThrowIfError(WithoutGil([&] { return c->KeyValueSet(k, v); }));
  });
  m.def("kv_insert", [](nb::bytes key, nb::bytes value) {
    auto c = Client();
    std::string k = Str(key), v = Str(value);
    ThrowIfError(WithoutGil([&] { return c->KeyValueInsert(k, v); }));
  }, "Sets the key only if absent: ALREADY_EXISTS otherwise, atomically in the service.");
  m.def("kv_increment", [](nb::bytes key, int64_t increment) {
    auto c = Client();
    std::string k = Str(key);
    return ValueOrThrow(WithoutGil([&] { return c->KeyValueIncrement(k, increment); }));
  }, "Adds to the key's decimal integer value (absent: 0) atomically in the service; the sum.");
  m.def("kv_get", [](nb::bytes key, double timeout) {
    auto c = Client();
    std::string k = Str(key);
    return Bytes(ValueOrThrow(WithoutGil([&] { return c->KeyValueGet(k, timeout); })));
  });
  m.def("kv_try_get", [](nb::bytes key) -> std::optional<nb::bytes> {
    auto c = Client();
    std::string k = Str(key);
    StatusOr<std::string> v = WithoutGil([&] { return c->KeyValueTryGet(k); });
    if (!v.ok() && v.status().code() == Code::kNotFound) return std::nullopt;
    return Bytes(ValueOrThrow(std::move(v)));
  });
  m.def("kv_delete", [](nb::bytes key) {
    auto c = Client();
    std::string k = Str(key);
    ThrowIfError(WithoutGil([&] { return c->KeyValueDelete(k); }));
  });
  m.def("kv_list", [](nb::bytes prefix) {
    auto c = Client();
    std::string p = Str(prefix);
    nb::list out;
    for (const auto& [k, val] : ValueOrThrow(WithoutGil([&] { return c->KeyValueList(p); }))) {
      out.append(nb::make_tuple(Bytes(k), Bytes(val)));
    }
    return out;
  });
  m.def("barrier", [](const std::string& name, double timeout) {
    auto c = Client();
    ThrowIfError(WithoutGil([&] {
      RecordedBarrier recorded(name);
      Status st = c->Barrier(name, timeout);
      if (!st.ok()) recorded.Fail(st.message());
      return st;
    }));
  });
}

}  // namespace

void BindCoordination(nb::module_& m) {
  BindMembership(m);
  BindKeyValueStore(m);
}

}  // namespace myplugin::python

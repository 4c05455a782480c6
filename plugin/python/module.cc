// The Python extension module _myplugin: version information, and the
// custom-call handler that jax_plugin installs for platform "myplugin".
// It reaches the engine only through our PJRT_Api (the capsule that
// register_plugin returns), never by linking to the plugin library.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/tuple.h>

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator_cache.h"
#include "collectives/device_collectives.h"
#include "collectives/ffi_handlers.h"
#include "collectives/flight_recorder.h"
#include "collectives/straggler_watch.h"
#ifdef MYPLUGIN_HAVE_NCCL
#include "collectives/nccl_ffi_handlers.h"
#endif
#include "collectives/dtype.h"
#include "common/printable.h"
#include "common/status.h"
#include "coordination/runtime.h"
#include "coordination/service.h"
#include "coordination/wire.h"

#include "pjrt/ffi_extension.h"
#include "python/host_callback.h"
#include "pjrt/host_callback_targets.h"
#include "spmd/cost_analysis_hook.h"
#include "spmd/program_hooks.h"
#include "pjrt_c_api.h"

namespace nb = nanobind;

namespace {

const PJRT_Api* ApiFromCapsule(nb::handle capsule) {
  void* p = PyCapsule_GetPointer(capsule.ptr(), "pjrt_c_api");
  if (p == nullptr) {
    PyErr_Clear();
    throw nb::type_error("expected the 'pjrt_c_api' capsule that jax's register_plugin returns");
  }
  return static_cast<const PJRT_Api*>(p);
}

std::string TakeError(const PJRT_Api* api, PJRT_Error* error) {
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  return text;
}

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
  const myplugin::FfiExtension* ffi = nullptr;
  for (PJRT_Extension_Base* ext = api->extension_start; ext != nullptr; ext = ext->next) {
    if (ext->type == PJRT_Extension_Type_FFI) ffi = reinterpret_cast<const myplugin::FfiExtension*>(ext);
  }
  if (ffi == nullptr) throw std::runtime_error("this PJRT plugin has no FFI extension");
  myplugin::FfiRegisterHandlerArgs args{};
  args.struct_size = myplugin::kFfiRegisterHandlerArgsSize;
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

const char* CodeName(myplugin::Code code) {
  static const char* names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? names[i] : "UNKNOWN";
}

// Our Status becomes a RuntimeError whose message starts with the code.
void ThrowIfError(const myplugin::Status& st) {
  // Messages may carry a peer's bytes (a key, a failure reason): never let decoding them fail.
  if (!st.ok()) throw std::runtime_error(std::string(CodeName(st.code())) + ": " + myplugin::PrintableUtf8(st.message()));
}

template <typename T>
T ValueOrThrow(myplugin::StatusOr<T> v) {
  ThrowIfError(v.status());
  return v.take();
}

namespace coord = myplugin::coordination;

std::shared_ptr<coord::CoordinationClient> Client() {
  auto client = coord::DistributedRuntime::Get().client();
  if (!client) {
    throw std::runtime_error(
        "FAILED_PRECONDITION: myplugin's distributed runtime is not initialized "
        "(call jax_plugin.distributed.initialize() first)");
  }
  return client;
}

nb::bytes Bytes(const std::string& s) { return nb::bytes(s.data(), s.size()); }

namespace coll = myplugin::collectives;
using Bytes1D = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// Inputs may be read-only (numpy views of jax arrays are).
using ConstBytes1D = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The devices of the job: how many each process has, and which process this is.
struct DeviceLayout {
  int devices_per_process;
  int process;
  int num_processes;
};

DeviceLayout Layout(size_t local_buffers) {
  auto& rt = coord::DistributedRuntime::Get();
  if (!rt.initialized()) return {static_cast<int>(local_buffers), 0, 1};
  auto procs = rt.processes();
  return {procs[rt.process_id()].num_devices, rt.process_id(), rt.num_processes()};
}

// Runs one collective on raw bytes, one buffer per local device of the
// clique; jax_plugin.collectives does the numpy side.
void RunCollective(const std::string& op, const std::string& reduction_name, const std::string& dtype_name,
                   std::vector<ConstBytes1D> sends, std::vector<Bytes1D> recvs, std::vector<int> clique,
                   std::vector<std::pair<int, int>> pairs) {
  coll::DataType dtype = ValueOrThrow(coll::ParseDataType(dtype_name));
  coll::Reduction reduction =
      reduction_name.empty() ? coll::Reduction::kNone : ValueOrThrow(coll::ParseReduction(reduction_name));
  const size_t item = coll::ByteSize(dtype);
  if (sends.empty() || sends.size() != recvs.size()) throw std::invalid_argument("one send and recv buffer per device");
  if (sends[0].shape(0) % item != 0) throw std::invalid_argument("send buffer is not a whole number of elements");
  const size_t count = sends[0].shape(0) / item;
  DeviceLayout layout = Layout(sends.size());
  if (clique.empty()) {
    for (int d = 0; d < layout.devices_per_process * layout.num_processes; ++d) clique.push_back(d);
  }
  coll::DeviceBuffers buffers;
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].shape(0) != sends[0].shape(0)) throw std::invalid_argument("every device must send the same size");
    buffers.send.push_back(sends[i].data());
    buffers.recv.push_back(recvs[i].data());
  }
  myplugin::Status st;
  {
    nb::gil_scoped_release release;
    coll::DeviceCollectives c(clique, layout.process, layout.devices_per_process);
    if (op == "all_reduce") {
      st = c.AllReduce(buffers, count, dtype, reduction);
    } else if (op == "all_gather") {
      st = c.AllGather(buffers, count, dtype);
    } else if (op == "reduce_scatter") {
      st = c.ReduceScatter(buffers, count, dtype, reduction);
    } else if (op == "all_to_all") {
      st = c.AllToAll(buffers, count, dtype);
    } else if (op == "collective_permute") {
      st = c.CollectivePermute(buffers, count, dtype, pairs);
    } else {
      st = myplugin::InvalidArgument("unknown collective '" + op + "'");
    }
  }
  ThrowIfError(st);
}

void BindCollectives(nb::module_& m) {
  m.def("collective", &RunCollective, nb::arg("op"), nb::arg("reduction"), nb::arg("dtype"), nb::arg("send"),
        nb::arg("recv"), nb::arg("clique"), nb::arg("pairs"));
  m.def("collective_barrier", [](std::vector<int> processes) {
    myplugin::Status st;
    {
      nb::gil_scoped_release release;
      auto comm = coll::CommunicatorCache::Get().ForClique(std::move(processes));
      st = comm.ok() ? comm.value()->Barrier() : comm.status();
    }
    ThrowIfError(st);
  }, nb::arg("processes"));
  m.def("local_device_count", [] { return Layout(1).devices_per_process; });
  m.def("ffi_targets", [] {
    nb::dict out;
    for (const auto& [name, handler] : coll::FfiHandlers()) out[name.c_str()] = nb::capsule(handler);
    return out;
  }, "The collectives' XLA FFI handlers, as capsules for jax.ffi.register_ffi_target.");
  m.def("nccl_ffi_targets", []() -> std::optional<nb::dict> {
#ifdef MYPLUGIN_HAVE_NCCL
    nb::dict out;
    for (const auto& [name, handler] : coll::NcclFfiHandlers()) out[name.c_str()] = nb::capsule(handler);
    return out;
#else
    return std::nullopt;
#endif
  }, "The NCCL handlers for the CUDA engine (None when built without NCCL's headers).");
}

void BindCoordination(nb::module_& m) {
  nb::class_<coord::CoordinationService>(m, "CoordinationService",
                                         "A coordination service, for launchers and the standalone CLI.")
      .def_static(
          "start",
          [](const std::string& bind_host, int port, int num_processes, const std::string& token,
             double heartbeat_timeout, double initialization_timeout, int max_connections) {
            coord::ServiceOptions o;
            o.num_processes = num_processes;
            o.token = token;
            o.heartbeat_timeout_s = heartbeat_timeout;
            o.initialization_timeout_s = initialization_timeout;
            o.max_connections = max_connections;
            return ValueOrThrow(coord::CoordinationService::Start(bind_host, port, o));
          },
          nb::arg("bind_host"), nb::arg("port"), nb::arg("num_processes"), nb::arg("token"),
          nb::arg("heartbeat_timeout"), nb::arg("initialization_timeout"),
          nb::arg("max_connections") = coord::kDefaultMaxConnections)
      .def_prop_ro("port", &coord::CoordinationService::port)
      .def("connections", &coord::CoordinationService::connections)
      .def("refused_connections", &coord::CoordinationService::refused_connections)
      .def("stop", &coord::CoordinationService::Stop, nb::call_guard<nb::gil_scoped_release>())
      .def("failure",
           [](coord::CoordinationService& s) -> std::optional<std::string> {
             auto f = s.failure();
             if (!f) return std::nullopt;
             return myplugin::PrintableUtf8(f->message());
           })
      .def("failed_process",
           [](coord::CoordinationService& s) -> std::optional<int> {
             int p = s.failed_process();
             if (p < 0) return std::nullopt;
             return p;
           })
      .def("all_departed", &coord::CoordinationService::all_departed)
      .def(
          "restart",
          [](coord::CoordinationService& s, const std::string& token, int num_processes) {
            myplugin::Status st;
            {
              nb::gil_scoped_release release;
              st = s.Restart(token, num_processes);
            }
            ThrowIfError(st);
          },
          nb::arg("token"), nb::arg("num_processes"),
          "Begins the job's next attempt: a fresh state for num_processes processes presenting token.")
      .def_prop_ro("attempt", &coord::CoordinationService::attempt);

  m.def(
      "distributed_initialize",
      [](std::vector<std::string> addresses, int num_processes, int process_id, const std::string& token,
         double initialization_timeout, bool fate_sharing, const std::string& hostname,
         int num_devices,
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
        myplugin::Status st;
        {
          nb::gil_scoped_release release;
          st = coord::DistributedRuntime::Get().Initialize(o);
        }
        ThrowIfError(st);
      },
      nb::arg("addresses"), nb::arg("num_processes"), nb::arg("process_id"), nb::arg("token"),
      nb::arg("initialization_timeout"), nb::arg("fate_sharing"), nb::arg("hostname"), nb::arg("num_devices"),
      nb::arg("device_kind"), nb::arg("os_pid"), nb::arg("advertise_address") = "",
      nb::arg("network_interface") = "");
  m.def("distributed_shutdown", [](double timeout) {
    myplugin::Status st;
    {
      nb::gil_scoped_release release;
      myplugin::collectives::RecordedBarrier recorded("the shutdown barrier");
      st = coord::DistributedRuntime::Get().Shutdown(timeout);
      if (!st.ok()) recorded.Fail(st.message());
    }
    ThrowIfError(st);
  });
  m.def("distributed_is_initialized", [] { return coord::DistributedRuntime::Get().initialized(); });
  m.def("process_id", [] { return coord::DistributedRuntime::Get().process_id(); });
  m.def("num_processes", [] { return coord::DistributedRuntime::Get().num_processes(); });
  m.def("global_processes", [] {
    nb::list out;
    for (const auto& p : coord::DistributedRuntime::Get().processes()) {
      nb::dict d;
      d["hostname"] = p.hostname;
      d["num_devices"] = p.num_devices;
      d["device_kind"] = p.device_kind;
      d["pid"] = p.pid;
      d["address"] = p.address;
      out.append(d);
    }
    return out;
  });
  m.def("failure", []() -> std::optional<std::string> {
    auto client = coord::DistributedRuntime::Get().client();
    if (!client) return std::nullopt;
    auto f = client->failure();
    if (!f) return std::nullopt;
    return myplugin::PrintableUtf8(f->message());
  });
  m.def("kv_set", [](nb::bytes key, nb::bytes value) {
    auto c = Client();
    std::string k(key.c_str(), key.size()), v(value.c_str(), value.size());
    myplugin::Status st;
    {
      nb::gil_scoped_release release;
      st = c->KeyValueSet(k, v);
    }
    ThrowIfError(st);
  });
  m.def("kv_get", [](nb::bytes key, double timeout) {
    auto c = Client();
    std::string k(key.c_str(), key.size());
    myplugin::StatusOr<std::string> v = myplugin::Status();
    {
      nb::gil_scoped_release release;
      v = c->KeyValueGet(k, timeout);
    }
    return Bytes(ValueOrThrow(std::move(v)));
  });
  m.def("kv_try_get", [](nb::bytes key) -> std::optional<nb::bytes> {
    auto c = Client();
    std::string k(key.c_str(), key.size());
    myplugin::StatusOr<std::string> v = myplugin::Status();
    {
      nb::gil_scoped_release release;
      v = c->KeyValueTryGet(k);
    }
    if (!v.ok() && v.status().code() == myplugin::Code::kNotFound) return std::nullopt;
    return Bytes(ValueOrThrow(std::move(v)));
  });
  m.def("kv_delete", [](nb::bytes key) {
    auto c = Client();
    std::string k(key.c_str(), key.size());
    myplugin::Status st;
    {
      nb::gil_scoped_release release;
      st = c->KeyValueDelete(k);
    }
    ThrowIfError(st);
  });
  m.def("kv_list", [](nb::bytes prefix) {
    auto c = Client();
    std::string p(prefix.c_str(), prefix.size());
    myplugin::StatusOr<std::vector<std::pair<std::string, std::string>>> v = myplugin::Status();
    {
      nb::gil_scoped_release release;
      v = c->KeyValueList(p);
    }
    nb::list out;
    for (const auto& [k, val] : ValueOrThrow(std::move(v))) out.append(nb::make_tuple(Bytes(k), Bytes(val)));
    return out;
  });
  m.def("barrier", [](const std::string& name, double timeout) {
    auto c = Client();
    myplugin::Status st;
    {
      nb::gil_scoped_release release;
      myplugin::collectives::RecordedBarrier recorded(name);
      st = c->Barrier(name, timeout);
      if (!st.ok()) recorded.Fail(st.message());
    }
    ThrowIfError(st);
  });
  m.def("straggler_watch_start", [](int stack_signal, int stack_fd, int os_pid, const std::string& host) {
    myplugin::collectives::WatchOptions o{stack_signal, stack_fd, os_pid, host};
    myplugin::Status st;
    {
      nb::gil_scoped_release release;
      st = myplugin::collectives::StartWatch(o);
    }
    ThrowIfError(st);
  }, nb::arg("stack_signal"), nb::arg("stack_fd"), nb::arg("os_pid"), nb::arg("host"));
  m.def("straggler_settings_check", [] { ThrowIfError(myplugin::collectives::CheckWatchSettings()); });
  m.def("flight_recorder_dump", [](const std::string& reason) {
    nb::gil_scoped_release release;
    return myplugin::collectives::DumpFlightRecorder(reason);
  });
  m.def("report_error", [](const std::string& reason) {
    auto client = coord::DistributedRuntime::Get().client();
    if (!client) return;
    nb::gil_scoped_release release;
    client->ReportError(reason);
  });
  BindCollectives(m);
  m.attr("FATE_SHARING_EXIT_CODE") = coord::kFateSharingExitCode;
  m.attr("PROTOCOL_VERSION") = coord::kProtocolVersion;
  {
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
    m.attr("COORDINATION_LIMITS") = limits;
  }
  m.def("coordination_send_progress_timeout", &coord::ServiceState::SendProgressTimeoutSeconds,
        nb::arg("heartbeat_timeout"),
        "Seconds a member may take no bytes from the service before it is declared failed.");
}

// The multi-process compile's Python steps (jax_plugin/spmd/compile_hooks.py),
// called from the PJRT library's compile, which jaxlib runs without the GIL.
// A Python exception becomes the compile's error; UnsupportedProgram (a
// construct we cannot run across processes) is reported as UNIMPLEMENTED.
myplugin::Status FromPythonError(nb::python_error& e, const char* step) {
  std::string type = nb::cast<std::string>(nb::handle(e.type()).attr("__name__"));
  std::string message = nb::cast<std::string>(nb::str(e.value()));
  auto code = type == "UnsupportedProgram" ? myplugin::Code::kUnimplemented : myplugin::Code::kInternal;
  return myplugin::Status(code, std::string(step) + ": " + message);
}

void SetProgramHooks(nb::callable shadow_options, nb::callable local_program) {
  namespace spmd = myplugin::spmd;
  // Shared, released with the GIL held: the hooks may be replaced or dropped
  // from any thread.
  auto keep = [](nb::callable fn) {
    return std::shared_ptr<nb::object>(new nb::object(std::move(fn)), [](nb::object* o) {
      nb::gil_scoped_acquire gil;
      delete o;
    });
  };
  auto shadow_fn = keep(std::move(shadow_options));
  auto local_fn = keep(std::move(local_program));
  spmd::ProgramHooks hooks;
  hooks.shadow_options = [shadow_fn](const std::string& options,
                                     const std::string& dump_dir) -> myplugin::StatusOr<std::string> {
    nb::gil_scoped_acquire gil;
    try {
      nb::object out = (*shadow_fn)(nb::bytes(options.data(), options.size()), dump_dir);
      nb::bytes b = nb::cast<nb::bytes>(out);
      return std::string(b.c_str(), b.size());
    } catch (nb::python_error& e) {
      return FromPythonError(e, "preparing the partition step");
    }
  };
  hooks.local_program = [local_fn](const spmd::LocalProgramRequest& r) -> myplugin::StatusOr<spmd::LocalProgram> {
    nb::gil_scoped_acquire gil;
    try {
      nb::object out = (*local_fn)(r.dump_dir, nb::bytes(r.compile_options.data(), r.compile_options.size()),
                                   r.assignment, r.num_devices, r.local_engine_ids);
      auto t = nb::cast<std::tuple<nb::bytes, nb::bytes, std::vector<int64_t>, bool>>(out);
      spmd::LocalProgram p;
      p.hlo_module_proto.assign(std::get<0>(t).c_str(), std::get<0>(t).size());
      p.compile_options.assign(std::get<1>(t).c_str(), std::get<1>(t).size());
      p.device_order = std::get<2>(t);
      p.process_independent = std::get<3>(t);
      return p;
    } catch (nb::python_error& e) {
      return FromPythonError(e, "rewriting the partitioned program");
    } catch (std::exception& e) {
      return myplugin::Internal(std::string("rewriting the partitioned program: ") + e.what());
    }
  };
  spmd::SetProgramHooks(std::move(hooks));
}

void BindHostCallbacks(nb::module_& m) {
  m.def("set_host_callback_dispatcher", [](nb::callable fn) {
    myplugin::python::SetHostCallbackDispatcher(fn.ptr());
  }, nb::arg("dispatcher"), "Installs the Python function that runs every host callback (by id).");
  m.def("host_callback_targets", [] {
    nb::dict names;
    names["cpu"] = std::string(myplugin::kHostCallbackTarget);
    names["cuda"] = std::string(myplugin::kCudaHostCallbackTarget);
    return names;
  }, "The custom-call target names of Python host callbacks, by engine kind (jax's own names).");
  m.def("host_callback_target", [] { return nb::capsule(myplugin::python::HostCallbackHandler()); },
        "The host engine's XLA FFI handler of Python host callbacks.");
  m.def("cuda_host_callback_target", [](const std::string& cudart_path) -> std::optional<nb::capsule> {
#ifdef MYPLUGIN_HAVE_CUDA_HEADERS
    return nb::capsule(ValueOrThrow(myplugin::python::CudaHostCallbackHandler(cudart_path)));
#else
    return std::nullopt;
#endif
  }, nb::arg("cudart_path"),
     "The CUDA engine's handler, which copies through the CUDA runtime at cudart_path (None when built without "
     "the CUDA headers).");
}

void SetCostAnalysisHook(nb::callable analyze) {
  auto fn = std::shared_ptr<nb::object>(new nb::object(std::move(analyze)), [](nb::object* o) {
    nb::gil_scoped_acquire gil;
    delete o;
  });
  myplugin::spmd::SetCostAnalysisHook(
      [fn](const std::string& module) -> myplugin::StatusOr<myplugin::spmd::CostProperties> {
        nb::gil_scoped_acquire gil;
        try {
          nb::object out = (*fn)(nb::bytes(module.data(), module.size()));
          myplugin::spmd::CostProperties props;
          for (auto [name, value] : nb::cast<nb::dict>(out)) {
            props.emplace_back(nb::cast<std::string>(name), nb::cast<double>(value));
          }
          return props;
        } catch (nb::python_error& e) {
          // jax reads UNIMPLEMENTED as "no cost analysis" (None), anything else as a failure.
          if (e.matches(PyExc_NotImplementedError)) {
            return myplugin::Unimplemented("cost analysis: " + nb::cast<std::string>(nb::str(e.value())));
          }
          return FromPythonError(e, "cost analysis");
        } catch (std::exception& e) {
          return myplugin::Internal(std::string("cost analysis: ") + e.what());
        }
      });
}

// The flight recorder's record of a barrier that runs in Python (jax's
// distributed client builds barriers of some processes on the key-value
// store): begin, then end once, with ok = false writing the recorders.
void BindRecordedBarriers(nb::module_& m) {
  namespace coll = myplugin::collectives;
  m.def("flight_recorder_barrier_begin", [](const std::string& name, const std::vector<int>& members) {
    return coll::RecordedBarrier::Begin(name, members);
  }, nb::arg("name"), nb::arg("members"));
  m.def("flight_recorder_barrier_end", [](uint64_t id, bool ok, const std::string& why) {
    nb::gil_scoped_release release;  // a failure writes the recorder
    coll::RecordedBarrier::End(id, ok, why);
  }, nb::arg("id"), nb::arg("ok"), nb::arg("why") = "");
}

}  // namespace

NB_MODULE(_myplugin, m) {
  m.doc() = "myplugin native helpers";
  m.attr("PJRT_API_VERSION") = nb::make_tuple(PJRT_API_MAJOR, PJRT_API_MINOR);
  m.def("register_custom_call_target", &RegisterCustomCallTarget, nb::arg("c_api"), nb::arg("name"),
        nb::arg("fn"), nb::arg("platform"), nb::arg("api_version") = 1, nb::arg("traits") = 0,
        "Registers a typed XLA FFI handler with the engine behind a myplugin PJRT_Api capsule.");
  BindCoordination(m);
  BindHostCallbacks(m);
  BindRecordedBarriers(m);
  m.def("set_program_hooks", &SetProgramHooks, nb::arg("shadow_options"), nb::arg("local_program"),
        "Installs the Python steps of the multi-process compile.");
  m.def("set_cost_analysis_hook", &SetCostAnalysisHook, nb::arg("analyze"),
        "Installs XLA's cost analysis of a serialized HloModuleProto (-> {property: value}).");
}

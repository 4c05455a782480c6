// One file for one PJRT object (~380 lines): the Client class and the C API
// entry points over it, side by side.
#include "pjrt/client.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "collectives/device_ids.h"
#include "collectives/process_runtime.h"
#include "common/log.h"
#include "coordination/runtime.h"
#include "pjrt/api_table.h"
#include "pjrt/build_id.h"
#include "pjrt/engine_instance.h"
#include "pjrt/error.h"

namespace myplugin {
namespace {

// Engine object -> ours, for every live client.
struct EngineObjectMap {
  std::shared_mutex mu;
  std::unordered_map<PJRT_Device*, Device*> devices;
  std::unordered_map<PJRT_Memory*, Memory*> memories;
};

// Looked up once: the owner never replaces nor destroys what it holds, and
// this map is read on every call that crosses into the engine.
EngineObjectMap& ObjectMap() {
  static EngineObjectMap& map = collectives::ProcessRuntime::Get().Attached<EngineObjectMap>();
  return map;
}

}  // namespace

Device* DeviceOfEngine(PJRT_Device* engine_device) {
  EngineObjectMap& m = ObjectMap();
  std::shared_lock<std::shared_mutex> lock(m.mu);
  auto it = m.devices.find(engine_device);
  return it == m.devices.end() ? nullptr : it->second;
}

Memory* MemoryOfEngine(PJRT_Memory* engine_memory) {
  EngineObjectMap& m = ObjectMap();
  std::shared_lock<std::shared_mutex> lock(m.mu);
  auto it = m.memories.find(engine_memory);
  return it == m.memories.end() ? nullptr : it->second;
}

namespace {

// The job as this process sees it: the global topology agreed through the
// coordination service, or this process alone.
struct JobView {
  int process_index = 0;
  std::vector<coordination::ProcessInfo> processes;
};

StatusOr<JobView> ViewOfJob(const ClientOptions& options) {
  coordination::DistributedRuntime& runtime = collectives::ProcessRuntime::Get().distributed();
  JobView view;
  if (!runtime.initialized()) {
    if (options.num_nodes > 1) {
      return FailedPrecondition("jax.distributed reports " + std::to_string(options.num_nodes) +
                                " processes, but this process has not joined myplugin's coordination service "
                                "(jax_plugin joins it when the backend is created; was the plugin registered "
                                "by hand?)");
    }
    coordination::ProcessInfo self;
    self.num_devices = options.num_devices;
    view.processes.push_back(self);
    return view;
  }
  view.process_index = runtime.process_id();
  view.processes = runtime.processes();
  const int n = static_cast<int>(view.processes.size());
  if (options.num_nodes > 0 && (options.num_nodes != n || options.node_id != view.process_index)) {
    return FailedPrecondition("jax.distributed says this is process " + std::to_string(options.node_id) + " of " +
                              std::to_string(options.num_nodes) + ", myplugin's coordination service says process " +
                              std::to_string(view.process_index) + " of " + std::to_string(n));
  }
  const int local = view.processes[view.process_index].num_devices;
  if (options.num_devices_given && options.num_devices != local) {
    return InvalidArgument("this process registered " + std::to_string(local) +
                           " local devices with the coordination service, but the client was asked for " +
                           std::to_string(options.num_devices));
  }
  for (int p = 0; p < n; ++p) {
    if (view.processes[p].num_devices != local) {
      return InvalidArgument("every process must have the same number of local devices: process " +
                             std::to_string(view.process_index) + " has " + std::to_string(local) + ", process " +
                             std::to_string(p) + " (" + view.processes[p].hostname + ", pid " +
                             std::to_string(view.processes[p].pid) + ") has " +
                             std::to_string(view.processes[p].num_devices));
    }
  }
  return view;
}

}  // namespace

StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  MYPLUGIN_RETURN_IF_ERROR(EnsureEngineLoaded());
  StatusOr<JobView> job = ViewOfJob(options);
  if (!job.ok()) return job.status();
  // After ViewOfJob: a job of several processes has joined the coordination
  // service, whose key-values bootstrap NCCL's communicators.
  MYPLUGIN_RETURN_IF_ERROR(EnsureNcclForEngine());
  EngineClientOptions engine_options;
  engine_options.num_devices = job.value().processes[job.value().process_index].num_devices;
  engine_options.cpu = CurrentEngineKind() == EngineKind::kCpu;
  engine_options.visible_devices = options.visible_devices;  // local_device_ids, on GPUs
  engine_options.gpu_memory = options.settings.gpu_memory;
  // One process on GPUs, no count asked for: every GPU the engine sees.
  const bool engine_decides = !engine_options.cpu && job.value().processes.size() == 1 && !options.num_devices_given;
  if (engine_decides) engine_options.num_devices = 0;
  StatusOr<std::unique_ptr<EngineClient>> engine_client = EngineClient::Create(Engine(), engine_options);
  if (!engine_client.ok()) return engine_client.status();
  if (engine_decides) {
    job.value().processes[0].num_devices = static_cast<int>(engine_client.value()->addressable_devices().size());
  }
  std::unique_ptr<Client> client(new Client(engine_client.take(), job.value().process_index, options.settings));
  MYPLUGIN_RETURN_IF_ERROR(client->BuildDevices(job.value().processes));
  return client;
}

Status Client::BuildDevices(const std::vector<coordination::ProcessInfo>& processes) {
  // Global ids run process by process: process p's local device j is
  // sum(devices of processes before p) + j.
  int first_id = 0;
  for (int p = 0; p < static_cast<int>(processes.size()); ++p) {
    if (p == process_index_) {
      MYPLUGIN_RETURN_IF_ERROR(AddLocalDevices(first_id));
    } else {
      AddRemoteDevices(p, processes[p], first_id);
    }
    first_id += processes[p].num_devices;
  }
  EngineClient& engine = *engine_client_;
  std::vector<PJRT_DeviceDescription*> descriptions;
  for (const auto& d : devices_) descriptions.push_back(ToC(&d->description()));
  // The build id and the engine's version: jax keys its compilation cache by
  // this string, and our serialized executables load only where it is equal.
  platform_version_ = std::string(kPlatformName) + " " + kPluginVersion + " (build " + BuildId() +
                      ") over XLA engine '" +
                      engine.platform_name() + "' " + engine.platform_version() + " (PJRT C API " +
                      Engine().ApiVersionString() + ")";
  // And the job's shape: a multi-process executable holds one process's
  // local program, so jax's cache key (which counts the devices, not who
  // owns them) must tell a job of 2 x 2 from one process of 4 (a cache miss,
  // not an entry refused after it was read).
  if (processes.size() > 1) {
    std::string shape;
    for (const coordination::ProcessInfo& p : processes) shape += (shape.empty() ? "" : "+") + std::to_string(p.num_devices);
    platform_version_ += " in a job of " + std::to_string(processes.size()) + " processes (devices " + shape + ")";
  }
  topology_ = std::make_unique<Topology>(kPlatformName, platform_version_, std::move(descriptions));
  topology_->set_owner(this);

  // Our collectives' handlers learn a device's global id from its ordinal.
  std::vector<std::pair<int, int>> ordinals;
  for (const auto& d : devices_) {
    if (d->addressable()) ordinals.emplace_back(d->local_hardware_id(), d->id());
  }
  collectives::SetLocalDeviceIds(ordinals);

  EngineObjectMap& m = ObjectMap();
  std::unique_lock<std::shared_mutex> lock(m.mu);
  for (const auto& d : devices_) {
    if (d->engine() != nullptr) m.devices[d->engine()] = d.get();
  }
  for (const auto& mem : memories_) {
    if (mem->engine() != nullptr) m.memories[mem->engine()] = mem.get();
  }
  return OkStatus();
}

Status Client::AddLocalDevices(int first_id) {
  EngineClient& engine = *engine_client_;
  std::map<PJRT_Memory*, Memory*> memory_of;
  int ordinal = 0;
  for (PJRT_Device* engine_device : engine.addressable_devices()) {
    StatusOr<std::string> kind = engine.DeviceKind(engine_device);
    if (!kind.ok()) return kind.status();
    StatusOr<int> hw = engine.LocalHardwareId(engine_device);
    if (!hw.ok()) return hw.status();
    StatusOr<int> engine_id = engine.DeviceId(engine_device);
    if (!engine_id.ok()) return engine_id.status();
    const int global_id = first_id + ordinal++;
    if (global_id != engine_id.value()) ids_are_engine_ids_ = false;
    devices_.push_back(std::make_unique<Device>(global_id, process_index_, kind.value(), engine_device, hw.value(),
                                                engine_id.value()));
    Device* device = devices_.back().get();

    StatusOr<std::vector<PJRT_Memory*>> mems = engine.DeviceMemories(engine_device);
    if (!mems.ok()) return mems.status();
    StatusOr<PJRT_Memory*> default_memory = engine.DefaultMemory(engine_device);
    if (!default_memory.ok()) return default_memory.status();
    for (PJRT_Memory* engine_memory : mems.value()) {
      Memory*& memory = memory_of[engine_memory];
      if (memory == nullptr) {
        StatusOr<int> mid = engine.MemoryId(engine_memory);
        if (!mid.ok()) return mid.status();
        StatusOr<std::string> mkind = engine.MemoryKind(engine_memory);
        if (!mkind.ok()) return mkind.status();
        StatusOr<int> mkind_id = engine.MemoryKindId(engine_memory);
        if (!mkind_id.ok()) return mkind_id.status();
        memories_.push_back(std::make_unique<Memory>(mid.value(), mkind.value(), mkind_id.value(), engine_memory));
        memory = memories_.back().get();
        c_memories_.push_back(ToC(memory));
      }
      memory->AddDevice(device);
      device->AddMemory(memory, engine_memory == default_memory.value());
    }
    c_devices_.push_back(ToC(device));
    c_addressable_devices_.push_back(ToC(device));
  }
  return OkStatus();
}

// Devices of other processes: described, never addressed. Each gets one
// "device" memory of its own so that jax can ask any device for its default
// memory kind.
void Client::AddRemoteDevices(int process_index, const coordination::ProcessInfo& info, int first_id) {
  // With devices elsewhere, every program must be checked for them (and the
  // engine's ids may differ from ours).
  ids_are_engine_ids_ = false;
  for (int j = 0; j < info.num_devices; ++j) {
    devices_.push_back(std::make_unique<Device>(first_id + j, process_index, info.device_kind, nullptr, j));
    Device* device = devices_.back().get();
    remote_memories_.push_back(std::make_unique<Memory>(-1 - device->id(), "device", 0, nullptr));
    Memory* memory = remote_memories_.back().get();
    memory->AddDevice(device);
    device->AddMemory(memory, true);
    c_devices_.push_back(ToC(device));
  }
}

Client::~Client() {
  // The engine's client, destroyed after this body, joins its threads: one
  // waiting for this process's other devices in a collective whose other
  // parts will never run would hold the teardown for the collective timeout.
  // Once the process has left its job (or never joined one), no collective
  // can complete any more: the rendezvous lets such waits go (a device
  // thread then fails its call) and says what it cut short. A client torn
  // down while the job goes on (in-place recovery's rebuilt backend) leaves
  // the rendezvous to the new client's collectives.
  collectives::ProcessRuntime& runtime = collectives::ProcessRuntime::Get();
  if (!runtime.distributed().initialized()) {
    for (const std::string& cut : runtime.local_rendezvous().Close("the client is being destroyed")) {
      LogLine("myplugin: the client's teardown cut short " + cut);
    }
  }
  EngineObjectMap& m = ObjectMap();
  std::unique_lock<std::shared_mutex> lock(m.mu);
  for (const auto& d : devices_) {
    if (d->engine() != nullptr) m.devices.erase(d->engine());
  }
  for (const auto& mem : memories_) m.memories.erase(mem->engine());
}

Device* Client::LookupDevice(int id) const {
  for (const auto& d : devices_) {
    if (d->id() == id) return d.get();
  }
  return nullptr;
}

StatusOr<int64_t> Client::EngineIdOf(int64_t global_id) const {
  Device* d = LookupDevice(static_cast<int>(global_id));
  if (d == nullptr) return InvalidArgument("myplugin has no device with id " + std::to_string(global_id));
  if (!d->addressable()) {
    return Unimplemented("this program uses device " + std::to_string(global_id) + " of process " +
                         std::to_string(d->description().process_index()) + " (this is process " +
                         std::to_string(process_index_) +
                         ")");
  }
  return d->engine_id();
}

StatusOr<bool> Client::NeedsMultiProcessCompile(const std::vector<std::vector<int64_t>>& assignment) const {
  size_t count = 0;
  bool remote = false;
  for (const auto& replica : assignment) {
    for (int64_t id : replica) {
      Device* d = LookupDevice(static_cast<int>(id));
      if (d == nullptr) return InvalidArgument("the program's device assignment names device " + std::to_string(id) +
                                               ", which myplugin does not have");
      remote = remote || !d->addressable();
      ++count;
    }
  }
  return remote || (count > 1 && settings_.spmd_rewrite_always);
}

spmd::MultiProcessCompiler& Client::multiprocess_compiler() {
  std::call_once(compiler_once_, [this] {
    std::map<int64_t, int64_t> local;
    for (const auto& d : devices_) {
      if (d->addressable()) local[d->id()] = d->engine_id();
    }
    compiler_ = std::make_unique<spmd::MultiProcessCompiler>(&ShadowEngine, static_cast<int>(devices_.size()),
                                                             std::move(local), settings_);
  });
  return *compiler_;
}

StatusOr<int64_t> Client::GlobalIdOf(int64_t engine_id) const {
  for (const auto& d : devices_) {
    if (d->addressable() && d->engine_id() == engine_id) return d->id();
  }
  return Internal("the engine named device " + std::to_string(engine_id) + ", which myplugin does not know");
}

Device* Client::LookupAddressableDevice(int local_hardware_id) const {
  for (const auto& d : devices_) {
    if (d->addressable() && d->local_hardware_id() == local_hardware_id) return d.get();
  }
  return nullptr;
}

// ---- C API adapters ----

PJRT_Error* PjrtClientCreate(PJRT_Client_Create_Args* args) {
  StatusOr<ClientOptions> options = ParseClientOptions(args->create_options, args->num_options, ProcessEnvironment);
  if (!options.ok()) return ToPjrtError(options.status());
  // The collectives this client's programs call are the process's.
  collectives::ProcessRuntime::Get().UseSettings(options.value().settings);
  collectives::ProcessRuntime::Get().local_rendezvous().Reopen();  // closed by a client before (recovery)
  StatusOr<std::unique_ptr<Client>> client = Client::Create(options.value());
  if (!client.ok()) return ToPjrtError(client.status());
  ChainEngineExtensions();  // for a jaxlib that made no PJRT_Plugin_Initialize call
  args->client = ToC(client.take().release());
  return nullptr;
}

PJRT_Error* PjrtClientDestroy(PJRT_Client_Destroy_Args* args) {
  delete FromC(args->client);
  return nullptr;
}

PJRT_Error* PjrtClientPlatformName(PJRT_Client_PlatformName_Args* args) {
  args->platform_name = kPlatformName;
  args->platform_name_size = sizeof(kPlatformName) - 1;
  return nullptr;
}

PJRT_Error* PjrtClientProcessIndex(PJRT_Client_ProcessIndex_Args* args) {
  args->process_index = FromC(args->client)->process_index();
  return nullptr;
}

PJRT_Error* PjrtClientPlatformVersion(PJRT_Client_PlatformVersion_Args* args) {
  const std::string& v = FromC(args->client)->platform_version();
  args->platform_version = v.data();
  args->platform_version_size = v.size();
  return nullptr;
}

PJRT_Error* PjrtClientTopologyDescription(PJRT_Client_TopologyDescription_Args* args) {
  args->topology = ToC(FromC(args->client)->topology());
  return nullptr;
}

PJRT_Error* PjrtClientDevices(PJRT_Client_Devices_Args* args) {
  const auto& d = FromC(args->client)->c_devices();
  args->devices = d.data();
  args->num_devices = d.size();
  return nullptr;
}

PJRT_Error* PjrtClientAddressableDevices(PJRT_Client_AddressableDevices_Args* args) {
  const auto& d = FromC(args->client)->c_addressable_devices();
  args->addressable_devices = d.data();
  args->num_addressable_devices = d.size();
  return nullptr;
}

PJRT_Error* PjrtClientLookupDevice(PJRT_Client_LookupDevice_Args* args) {
  Client* client = FromC(args->client);
  Device* d = client->LookupDevice(args->id);
  if (d == nullptr) {
    return ToPjrtError(InvalidArgument("myplugin has no device with id " + std::to_string(args->id) + " (it has " +
                                       std::to_string(client->c_devices().size()) + " devices)"));
  }
  args->device = ToC(d);
  return nullptr;
}

PJRT_Error* PjrtClientLookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args* args) {
  Client* client = FromC(args->client);
  Device* d = client->LookupAddressableDevice(args->local_hardware_id);
  if (d == nullptr) {
    return ToPjrtError(InvalidArgument("myplugin has no addressable device with local hardware id " +
                                       std::to_string(args->local_hardware_id) + " (it has " +
                                       std::to_string(client->c_addressable_devices().size()) + " local devices)"));
  }
  args->addressable_device = ToC(d);
  return nullptr;
}

PJRT_Error* PjrtClientAddressableMemories(PJRT_Client_AddressableMemories_Args* args) {
  const auto& m = FromC(args->client)->c_memories();
  args->addressable_memories = m.data();
  args->num_addressable_memories = m.size();
  return nullptr;
}

// jax.distributed reports its view of the processes here, from a watcher
// thread that aborts the process on any error. Our coordination service
// keeps the table that counts (and detects failures itself), so jax's view
// is accepted and not needed.
PJRT_Error* PjrtClientUpdateGlobalProcessInfo(PJRT_Client_UpdateGlobalProcessInfo_Args* args) { return nullptr; }

}  // namespace myplugin

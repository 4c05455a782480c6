#include "pjrt/cross_host_transfers.h"

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator_cache.h"
#include "collectives/failure_record.h"
#include "collectives/process_runtime.h"
#include "collectives/transfer_endpoint.h"
#include "common/huge_pages.h"
#include "coordination/runtime.h"
#include "engine/buffer_holds.h"
#include "pjrt/client.h"
#include "pjrt/device.h"
#include "pjrt/engine_instance.h"
#include "pjrt/error.h"
#include "pjrt/forwarding.h"

namespace myplugin {
namespace {

using collectives::TransferEndpoint;
using collectives::TransferSpec;

template <typename Args>
Args Init() {
  Args a{};
  a.struct_size = sizeof(Args);
  return a;
}

Status Await(PJRT_Event* event) {
  if (event == nullptr) return OkStatus();
  auto await = Init<PJRT_Event_Await_Args>();
  await.event = event;
  Status st = MYPLUGIN_ENGINE_STATUS(PJRT_Event_Await, &await);
  auto destroy = Init<PJRT_Event_Destroy_Args>();
  destroy.event = event;
  (void)MYPLUGIN_ENGINE_STATUS(PJRT_Event_Destroy, &destroy);
  return st;
}

// Lets go of a transfer's hold on `buffer` (engine/buffer_holds.h), making
// the delete and destroy that jax asked for meanwhile on the transfer's
// thread.
void LetGo(PJRT_Buffer* buffer) {
  collectives::ProcessRuntime::Get().buffer_holds().ReleaseThrough(Engine().api(), buffer);
}

// The process's endpoint, made on first use for the current job and
// membership epoch; held by the process runtime (its Attached<T>).
struct EndpointSlot {
  std::mutex mu;
  std::shared_ptr<TransferEndpoint> endpoint;  // under mu
  const void* client = nullptr;                 // under mu: the coordination client it belongs to
};

StatusOr<std::shared_ptr<TransferEndpoint>> Endpoint(const char* what) {
  collectives::ProcessRuntime& runtime = collectives::ProcessRuntime::Get();
  std::shared_ptr<coordination::CoordinationClient> client = runtime.distributed().client();
  if (!client) return FailedPrecondition(std::string(what) + " needs a job of several processes");
  const coordination::MembershipSnapshot membership = runtime.distributed().membership();
  EndpointSlot& slot = runtime.Attached<EndpointSlot>();
  std::lock_guard<std::mutex> lock(slot.mu);
  if (slot.endpoint && slot.client == client.get() && slot.endpoint->epoch() == membership.epoch) {
    return slot.endpoint;
  }
  slot.endpoint.reset();
  const int n = static_cast<int>(membership.member_ids.size());
  std::vector<int> everyone;
  for (int p = 0; p < n; ++p) everyone.push_back(p);
  StatusOr<std::string> host = collectives::ListenHostFor(everyone);
  if (!host.ok()) return host.status();
  // Processes that can share memory with this one (coordination/host_identity.h).
  const std::vector<coordination::ProcessInfo> processes = runtime.distributed().processes();
  std::vector<bool> same_host(n, false);
  for (int p = 0; p < n && p < static_cast<int>(processes.size()); ++p) {
    same_host[p] = !processes[p].host_id.empty() && processes[p].host_id == processes[membership.index].host_id;
  }
  StatusOr<std::unique_ptr<TransferEndpoint>> made =
      TransferEndpoint::Create(client, membership.epoch, membership.index, n, host.value(), std::move(same_host),
                               collectives::CommunicatorCache::Limits(*runtime.settings()));
  if (!made.ok()) return made.status();
  slot.endpoint = std::shared_ptr<TransferEndpoint>(made.take().release());
  slot.client = client.get();
  return slot.endpoint;
}

// The process that owns global device `id`, checked to be another one.
StatusOr<int> ProcessOf(Client* client, int32_t id, const char* role) {
  Device* device = client->LookupDevice(id);
  if (device == nullptr) return InvalidArgument(std::string("the ") + role + " device " + std::to_string(id) + " does not exist");
  if (device->addressable()) {
    return InvalidArgument(std::string("the ") + role + " device " + std::to_string(id) +
                           " belongs to this process: a cross-host transfer goes to another process");
  }
  return device->description().process_index();
}

// One send: the source buffer, kept until the last byte left, and the event
// that jax waits on (the ready event of a buffer of no bytes that this send
// fills, or fails, when it ends: the engine's events are the only ones jax
// can wait on).
class SendState {
 public:
  static StatusOr<std::shared_ptr<SendState>> Make(PJRT_Buffer* source, Client* client, Device* device,
                                                   PJRT_Event** event) {
    auto s = std::shared_ptr<SendState>(new SendState(source));
    // What the send needs of the source is taken now, on jax's thread: jax
    // may delete the array, or donate it to a call, as soon as this returns;
    // the hold keeps its memory until the send ends (engine/buffer_holds.h).
    if (!collectives::ProcessRuntime::Get().buffer_holds().Hold(source)) {
      return FailedPrecondition("the array to send has been deleted");
    }
    s->held_ = true;
    auto source_ready = Init<PJRT_Buffer_ReadyEvent_Args>();
    source_ready.buffer = source;
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ReadyEvent, &source_ready));
    s->source_ready_ = source_ready.event;
    if (CurrentEngineKind() == EngineKind::kCpu) {
      // Read in place (see Read): the hold keeps the memory through a
      // delete, and a call that donates the array meanwhile allocates its
      // result elsewhere.
      auto data = Init<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args>();
      data.buffer = source;
      MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_OpaqueDeviceMemoryDataPointer, &data));
      s->memory_ = static_cast<const char*>(data.device_memory_ptr);
    }
    PJRT_ShapeSpec spec{};
    spec.struct_size = PJRT_ShapeSpec_STRUCT_SIZE;
    spec.element_type = PJRT_Buffer_Type_U8;
    static const int64_t kNone[1] = {0};
    spec.dims = kNone;
    spec.num_dims = 1;
    auto create = Init<PJRT_Client_CreateBuffersForAsyncHostToDevice_Args>();
    create.client = client->engine_client().get();
    create.shape_specs = &spec;
    create.num_shape_specs = 1;
    create.memory = device->default_memory()->engine();
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Client_CreateBuffersForAsyncHostToDevice, &create));
    s->manager_ = create.transfer_manager;
    auto retrieve = Init<PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args>();
    retrieve.transfer_manager = s->manager_;
    retrieve.buffer_index = 0;
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer, &retrieve));
    s->done_buffer_ = retrieve.buffer_out;
    auto ready = Init<PJRT_Buffer_ReadyEvent_Args>();
    ready.buffer = s->done_buffer_;
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ReadyEvent, &ready));
    *event = ready.event;
    return s;
  }

  ~SendState() {
    if (source_ready_ != nullptr) {
      auto destroy = Init<PJRT_Event_Destroy_Args>();
      destroy.event = source_ready_;
      (void)MYPLUGIN_ENGINE_STATUS(PJRT_Event_Destroy, &destroy);
    }
    if (done_buffer_ != nullptr) {
      auto destroy = Init<PJRT_Buffer_Destroy_Args>();
      destroy.buffer = done_buffer_;
      (void)MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_Destroy, &destroy);
    }
    if (manager_ != nullptr) {
      auto destroy = Init<PJRT_AsyncHostToDeviceTransferManager_Destroy_Args>();
      destroy.transfer_manager = manager_;
      (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_Destroy, &destroy);
    }
    if (held_) LetGo(source_);
  }

  // Bytes of the source at `offset`, once the source is ready. The CPU
  // engine's buffer is host memory, read where it is: its CopyRawToHost is
  // work for the engine's thread pool, whose threads a program's collectives
  // hold while they wait for other processes (as many as this process has
  // devices, and the pool has as many threads as cores), so a send whose
  // process went on to such a program waited for a peer that waited for
  // the send. The CUDA engine copies into `scratch` from device memory, on
  // its own stream.
  StatusOr<const char*> Read(uint64_t offset, size_t size, char* scratch) {
    if (source_ready_ != nullptr) {
      PJRT_Event* ready = source_ready_;
      source_ready_ = nullptr;
      MYPLUGIN_RETURN_IF_ERROR(Await(ready));
    }
    if (memory_ != nullptr) return memory_ + offset;
    auto copy = Init<PJRT_Buffer_CopyRawToHost_Args>();
    copy.buffer = source_;
    copy.dst = scratch;
    copy.offset = static_cast<int64_t>(offset);
    copy.transfer_size = static_cast<int64_t>(size);
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_CopyRawToHost, &copy));
    MYPLUGIN_RETURN_IF_ERROR(Await(copy.event));
    return static_cast<const char*>(scratch);
  }

  // The send ended: jax's event fires, with the error if it failed.
  void Finish(const Status& st) {
    if (st.ok()) {
      static const char kNothing = 0;
      auto t = Init<PJRT_AsyncHostToDeviceTransferManager_TransferData_Args>();
      t.transfer_manager = manager_;
      t.buffer_index = 0;
      t.data = &kNothing;
      t.offset = 0;
      t.transfer_size = 0;
      t.is_last_transfer = true;
      if (MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_TransferData, &t).ok()) {
        (void)Await(t.done_with_h2d_transfer);
      }
      return;
    }
    const std::string message = "myplugin: copying an array across processes failed: " + st.message();
    auto e = Init<PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args>();
    e.transfer_manager = manager_;
    e.buffer_index = 0;
    e.error_code = static_cast<PJRT_Error_Code>(st.code());
    e.error_message = message.data();
    e.error_message_size = message.size();
    (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_SetBufferError, &e);
  }

 private:
  explicit SendState(PJRT_Buffer* source) : source_(source) {}
  PJRT_Buffer* source_;
  bool held_ = false;  // BufferHolds::Hold(source_)
  PJRT_Event* source_ready_ = nullptr;  // until the first read has waited for it
  const char* memory_ = nullptr;  // the source's bytes, when read in place (the CPU engine)
  PJRT_AsyncHostToDeviceTransferManager* manager_ = nullptr;
  PJRT_Buffer* done_buffer_ = nullptr;
};

// The type, shape and size of `buffer`, as a transfer names them.
Status Describe(PJRT_Buffer* buffer, TransferSpec* spec) {
  auto type = Init<PJRT_Buffer_ElementType_Args>();
  type.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ElementType, &type));
  auto dims = Init<PJRT_Buffer_Dimensions_Args>();
  dims.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_Dimensions, &dims));
  auto size = Init<PJRT_Buffer_OnDeviceSizeInBytes_Args>();
  size.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_OnDeviceSizeInBytes, &size));
  spec->element_type = static_cast<int32_t>(type.type);
  spec->dims.assign(dims.dims, dims.dims + dims.num_dims);
  spec->bytes = size.on_device_size_in_bytes;
  return OkStatus();
}

Status SendOne(Client* client, PJRT_Buffer* buffer, int32_t dst, int64_t transfer_key, PJRT_Event** event) {
  auto device = Init<PJRT_Buffer_Device_Args>();
  device.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_Device, &device));
  Device* src_device = DeviceOfEngine(device.device);
  if (src_device == nullptr) return Internal("the buffer to send lives on a device myplugin does not know");
  StatusOr<int> dst_process = ProcessOf(client, dst, "destination");
  if (!dst_process.ok()) return dst_process.status();
  TransferSpec spec;
  spec.key = transfer_key;
  spec.src_device = src_device->id();
  spec.dst_device = dst;
  MYPLUGIN_RETURN_IF_ERROR(Describe(buffer, &spec));
  StatusOr<std::shared_ptr<TransferEndpoint>> endpoint = Endpoint("copying an array to another process's device");
  if (!endpoint.ok()) return endpoint.status();
  StatusOr<std::shared_ptr<SendState>> state = SendState::Make(buffer, client, src_device, event);
  if (!state.ok()) return state.status();
  std::shared_ptr<SendState> s = state.take();
  endpoint.value()->Send(
      dst_process.value(), spec,
      [s](uint64_t offset, size_t size, char* scratch) { return s->Read(offset, size, scratch); },
      [s](const Status& st) mutable {
        s->Finish(st);
        s.reset();  // the source goes now, not when the queue's copy of this callback does
      });
  return OkStatus();
}

PJRT_Error* SendBuffers(CrossHostSendArgs* args) {
  if (args == nullptr || args->struct_size < sizeof(CrossHostSendArgs)) {
    return ToPjrtError(InvalidArgument("CrossHostSendBuffers: the args struct is smaller than this plugin needs"));
  }
  Client* client = FromC(args->client);
  for (size_t i = 0; i < args->num_buffers; ++i) args->send_events[i] = nullptr;
  for (size_t i = 0; i < args->num_buffers; ++i) {
    // The sends queued before a refusal go on: their receivers wait for them.
    Status st = SendOne(client, args->buffers[i], args->dst_global_device_ids[i], args->transfer_keys[i],
                        &args->send_events[i]);
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) (void)Await(args->send_events[j]);
      for (size_t j = 0; j < i; ++j) args->send_events[j] = nullptr;
      return ToPjrtError(st);
    }
  }
  return nullptr;
}

class Receiver {
 public:
  Receiver(PJRT_AsyncHostToDeviceTransferManager* manager, std::vector<TransferSpec> expected,
           std::vector<int> sources, std::shared_ptr<TransferEndpoint> endpoint)
      : manager_(manager),
        expected_(std::move(expected)),
        sources_(std::move(sources)),
        endpoint_(std::move(endpoint)),
        landing_(expected_.size()) {}

  ~Receiver() {
    for (size_t i = 0; i < landing_.size(); ++i) Unland(static_cast<int>(i));
    auto destroy = Init<PJRT_AsyncHostToDeviceTransferManager_Destroy_Args>();
    destroy.transfer_manager = manager_;
    (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_Destroy, &destroy);
  }

  // Every receive is posted before any is waited for: the senders' order
  // across devices need not be this one.
  void Run() {
    std::vector<std::shared_ptr<TransferEndpoint::Receive>> posted;
    for (size_t i = 0; i < expected_.size(); ++i) {
      const int index = static_cast<int>(i);
      posted.push_back(endpoint_->Post(sources_[i], expected_[i],
                                       [this, index](uint64_t offset, const char* data, size_t size, bool last) {
                                         return Transfer(index, data, offset, size, last);
                                       },
                                       landing_[i].memory));
    }
    for (size_t i = 0; i < posted.size(); ++i) {
      Status st = endpoint_->Wait(posted[i]);
      if (!st.ok()) {
        collectives::RecordFailure(st);
        Fail(static_cast<int>(i), st);
      }
      Unland(static_cast<int>(i));
    }
  }

  // On the CPU engine, where the destination is host memory: bytes from a
  // socket are read straight into buffer `i` (one copy fewer than through
  // the engine's transfer), under a hold (engine/buffer_holds.h), as a
  // send's source, so that jax deleting, dropping or donating the array
  // before it is ready frees nothing under the read. Huge pages are
  // asked for over it first: the first write then does not fault and clear
  // it 4 KiB at a time (docs/performance.md, cross-host transfers).
  void Land(int i, PJRT_Buffer* buffer, uint64_t bytes) {
    if (CurrentEngineKind() != EngineKind::kCpu || bytes == 0) return;
    auto data = Init<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args>();
    data.buffer = buffer;
    if (!MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_OpaqueDeviceMemoryDataPointer, &data).ok()) return;
    (void)AdviseHugePages(data.device_memory_ptr, static_cast<size_t>(bytes));
    if (!collectives::ProcessRuntime::Get().buffer_holds().Hold(buffer)) return;
    landing_[i] = {buffer, static_cast<char*>(data.device_memory_ptr)};
  }

 private:
  // Hands bytes to the engine and waits until it has them (so that `data`
  // may go away).
  Status Transfer(int i, const char* data, uint64_t offset, size_t size, bool last) {
    static const char kNothing = 0;
    // Already in place (read into the landing area): only the last piece
    // has something to say, that the buffer is whole.
    const bool landed = landing_[i].memory != nullptr && data == landing_[i].memory + offset;
    if (landed && !last) return OkStatus();
    if (landed) size = 0;
    auto t = Init<PJRT_AsyncHostToDeviceTransferManager_TransferData_Args>();
    t.transfer_manager = manager_;
    t.buffer_index = i;
    t.data = size > 0 ? data : &kNothing;
    t.offset = landed ? 0 : static_cast<int64_t>(offset);
    t.transfer_size = static_cast<int64_t>(size);
    t.is_last_transfer = last;
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_TransferData, &t));
    return Await(t.done_with_h2d_transfer);
  }

  void Fail(int i, const Status& why) {
    const std::string message = "myplugin: copying an array across processes failed: " + why.message();
    auto e = Init<PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args>();
    e.transfer_manager = manager_;
    e.buffer_index = i;
    e.error_code = static_cast<PJRT_Error_Code>(why.code());
    e.error_message = message.data();
    e.error_message_size = message.size();
    (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_SetBufferError, &e);
  }

  // The hold on buffer `i`'s landing area goes.
  void Unland(int i) {
    Landing& l = landing_[i];
    if (l.buffer == nullptr) return;
    LetGo(l.buffer);
    l = Landing{};
  }

  struct Landing {
    PJRT_Buffer* buffer = nullptr;
    char* memory = nullptr;
  };
  PJRT_AsyncHostToDeviceTransferManager* manager_;
  std::vector<TransferSpec> expected_;
  std::vector<int> sources_;
  std::shared_ptr<TransferEndpoint> endpoint_;
  std::vector<Landing> landing_;  // per buffer; set by Land before Run, cleared as each receive ends
};

PJRT_Error* ReceiveBuffers(CrossHostReceiveArgs* args) {
  if (args == nullptr || args->struct_size < sizeof(CrossHostReceiveArgs)) {
    return ToPjrtError(InvalidArgument("CrossHostReceiveBuffers: the args struct is smaller than this plugin needs"));
  }
  Client* client = FromC(args->client);
  Device* device = FromC(args->device);
  if (device->default_memory() == nullptr) return ToPjrtError(Internal("the destination device has no memory"));
  StatusOr<std::shared_ptr<TransferEndpoint>> endpoint = Endpoint("copying an array from another process's device");
  if (!endpoint.ok()) return ToPjrtError(endpoint.status());
  std::vector<PJRT_ShapeSpec> specs(args->num_shapes);
  std::vector<TransferSpec> expected(args->num_shapes);
  std::vector<int> sources;
  for (size_t i = 0; i < args->num_shapes; ++i) {
    specs[i].struct_size = PJRT_ShapeSpec_STRUCT_SIZE;
    specs[i].dims = args->num_dims[i];
    specs[i].num_dims = args->shape_num_dims[i];
    specs[i].element_type = args->element_types[i];
    expected[i].key = args->transfer_keys[i];
    expected[i].src_device = args->src_global_device_ids[i];
    expected[i].dst_device = device->id();
    expected[i].element_type = static_cast<int32_t>(args->element_types[i]);
    expected[i].dims.assign(args->num_dims[i], args->num_dims[i] + args->shape_num_dims[i]);
    StatusOr<int> source = ProcessOf(client, args->src_global_device_ids[i], "source");
    if (!source.ok()) return ToPjrtError(source.status());
    sources.push_back(source.value());
  }
  auto create = Init<PJRT_Client_CreateBuffersForAsyncHostToDevice_Args>();
  create.client = client->engine_client().get();
  create.shape_specs = specs.data();
  create.num_shape_specs = specs.size();
  create.memory = device->default_memory()->engine();
  if (Status st = MYPLUGIN_ENGINE_STATUS(PJRT_Client_CreateBuffersForAsyncHostToDevice, &create); !st.ok()) {
    return ToPjrtError(st);
  }
  for (size_t i = 0; i < args->num_shapes; ++i) {
    auto size = Init<PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args>();
    size.transfer_manager = create.transfer_manager;
    size.buffer_index = static_cast<int>(i);
    if (Status st = MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_BufferSize, &size); !st.ok()) {
      auto destroy = Init<PJRT_AsyncHostToDeviceTransferManager_Destroy_Args>();
      destroy.transfer_manager = create.transfer_manager;
      (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_Destroy, &destroy);
      return ToPjrtError(st);
    }
    expected[i].bytes = size.buffer_size;
  }
  std::vector<uint64_t> sizes;
  for (const TransferSpec& e : expected) sizes.push_back(e.bytes);
  auto receiver = std::make_unique<Receiver>(create.transfer_manager, std::move(expected), std::move(sources),
                                             endpoint.take());
  for (size_t i = 0; i < args->num_shapes; ++i) {
    auto retrieve = Init<PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args>();
    retrieve.transfer_manager = create.transfer_manager;
    retrieve.buffer_index = static_cast<int>(i);
    if (Status st = MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer, &retrieve);
        !st.ok()) {
      return ToPjrtError(st);  // the receiver's destructor frees the manager and the buffers not yet taken
    }
    args->buffers[i] = retrieve.buffer_out;
    receiver->Land(static_cast<int>(i), retrieve.buffer_out, sizes[i]);
  }
  // The buffers are returned now and become ready as their bytes come; a
  // failure (a dead peer, a timeout, another shape) becomes their error.
  std::thread([r = std::move(receiver)] { r->Run(); }).detach();
  return nullptr;
}

// The older API: jaxlib turns to it only when the two above answer UNIMPLEMENTED.
PJRT_Error* MakeCrossHostReceiveBuffers(void*) {
  return ToPjrtError(Unimplemented("myplugin receives cross-host transfers through CrossHostReceiveBuffers"));
}

void CopyToRemoteDevice(CopyToRemoteDeviceArgs* args) {
  if (args->event != nullptr) (void)Await(args->event);
  if (args->descriptor_destructor != nullptr && args->struct_size >= sizeof(CopyToRemoteDeviceArgs)) {
    args->descriptor_destructor(args->serialized_descriptor, args->serialized_descriptor_size);
  }
  if (args->on_done.on_done != nullptr) {
    args->on_done.on_done(
        ToPjrtError(Unimplemented("myplugin sends cross-host transfers through CrossHostSendBuffers")), false,
        args->on_done.user_arg);
  }
}

}  // namespace

PJRT_Extension_Base* OurCrossHostTransfersExtension(PJRT_Extension_Base* next) {
  static CrossHostTransfersExtension extension = [] {
    CrossHostTransfersExtension e{};
    e.base.struct_size = sizeof(CrossHostTransfersExtension);
    e.base.type = PJRT_Extension_Type_CrossHostTransfers;
    e.make_cross_host_receive_buffers = MakeCrossHostReceiveBuffers;
    e.copy_to_remote_device = CopyToRemoteDevice;
    e.cross_host_receive_buffers = ReceiveBuffers;
    e.cross_host_send_buffers = SendBuffers;
    return e;
  }();
  extension.base.next = next;
  return &extension.base;
}

}  // namespace myplugin

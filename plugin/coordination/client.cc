#include "coordination/client.h"

#include <unistd.h>

#include <cstdio>
#include <random>

#include "common/deadline.h"
#include "common/log.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

using Clock = std::chrono::steady_clock;

// Extra time a client gives the service beyond the service's own deadline
// for a blocking call, before it concludes the service is not answering.
constexpr double kReplyGraceSeconds = 10;

uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

// On the wire (and in the waits below): saturated, never an overflow.
uint64_t WireMillis(double seconds) { return static_cast<uint64_t>(SaturatedSeconds(seconds) * 1000); }

// A reply frame: the error it carries, or OK and the reader left after the header.
Status ReplyStatus(Reader& r, MessageType expected) {
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(r.Header(&type, &rid));
  if (type == MessageType::kError) {
    uint32_t code;
    std::string message;
    MYPLUGIN_RETURN_IF_ERROR(r.U32(&code));
    MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&message));
    return Status(static_cast<Code>(code), message);
  }
  if (type != expected) {
    return Internal(std::string("coordinator replied ") + MessageTypeName(type) + ", expected " +
                    MessageTypeName(expected));
  }
  return OkStatus();
}

// A reply that carries nothing but success or an error.
Status OkReply(const StatusOr<std::string>& reply) {
  if (!reply.ok()) return reply.status();
  Reader r(reply.value());
  return ReplyStatus(r, MessageType::kOk);
}

// A reply that carries one value.
StatusOr<std::string> ValueReply(const StatusOr<std::string>& reply) {
  if (!reply.ok()) return reply.status();
  Reader r(reply.value());
  MYPLUGIN_RETURN_IF_ERROR(ReplyStatus(r, MessageType::kValue));
  std::string value;
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&value));
  return value;
}

}  // namespace

StatusOr<std::unique_ptr<CoordinationClient>> CoordinationClient::Connect(const ClientOptions& options) {
  StatusOr<HostPort> hp = ParseHostPort(options.address);
  if (!hp.ok()) return hp.status();
  if (options.process_id < 0 || options.process_id >= options.num_processes) {
    return InvalidArgument("process id " + std::to_string(options.process_id) + " is out of range for " +
                           std::to_string(options.num_processes) + " processes");
  }
  StatusOr<Socket> socket = Socket::Connect(hp.value().host, hp.value().port, options.initialization_timeout_s);
  if (!socket.ok()) return socket.status();
  std::unique_ptr<CoordinationClient> client(new CoordinationClient(options, socket.take(), NewIncarnation()));
  MYPLUGIN_RETURN_IF_ERROR(client->Hello());
  client->last_heard_ = Clock::now();
  client->reader_ = std::thread([c = client.get()] { c->ReaderLoop(); });
  client->heartbeat_ = std::thread([c = client.get()] { c->HeartbeatLoop(); });
  return client;
}

CoordinationClient::CoordinationClient(const ClientOptions& options, Socket socket, uint64_t incarnation)
    : options_(options), socket_(std::move(socket)), incarnation_(incarnation) {}

CoordinationClient::~CoordinationClient() { StopThreads(); }

void CoordinationClient::StopThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  socket_.ShutdownBoth();
  if (reader_.joinable()) reader_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status CoordinationClient::Hello() {
  std::string hello = Writer(MessageType::kHello, 0)
                          .U32(kMagic)
                          .U16(kProtocolVersion)
                          .Bytes(options_.token)
                          .U32(static_cast<uint32_t>(options_.process_id))
                          .U64(incarnation_)
                          .Finish();
  MYPLUGIN_RETURN_IF_ERROR(socket_.SendAll(hello));
  std::string frame;
  Status st = socket_.RecvFrame(&frame, static_cast<int>(std::min<uint64_t>(WireMillis(std::max(10.0, options_.initialization_timeout_s)), INT32_MAX)));
  if (!st.ok()) {
    return Status(st.code(), "no answer from the myplugin coordinator at " + options_.address + ": " + st.message());
  }
  Reader r(frame);
  st = ReplyStatus(r, MessageType::kHelloOk);
  if (!st.ok()) {
    return Status(st.code(), "the myplugin coordinator at " + options_.address + " refused process " +
                                 std::to_string(options_.process_id) + ": " + st.message());
  }
  uint32_t num_processes;
  uint64_t interval_ms, timeout_ms;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&num_processes));
  MYPLUGIN_RETURN_IF_ERROR(r.U64(&interval_ms));
  MYPLUGIN_RETURN_IF_ERROR(r.U64(&timeout_ms));
  if (static_cast<int>(num_processes) != options_.num_processes) {
    return InvalidArgument("this process believes the job has " + std::to_string(options_.num_processes) +
                           " processes, the coordinator at " + options_.address + " was started for " +
                           std::to_string(num_processes));
  }
  heartbeat_interval_s_ = interval_ms / 1000.0;
  heartbeat_timeout_s_ = timeout_ms / 1000.0;
  return OkStatus();
}

StatusOr<std::string> CoordinationClient::Call(const std::string& what, std::string frame, uint32_t request_id,
                                               double timeout_s) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_) return *failure_;
    if (shut_down_) return FailedPrecondition("the coordination client has shut down");
    pending_[request_id] = &pending;
  }
  Status sent;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    sent = socket_.SendAll(frame);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!sent.ok()) {
    pending_.erase(request_id);
    return Status(Code::kUnavailable, "cannot reach the myplugin coordinator at " + options_.address + ": " +
                                          sent.message());
  }
  auto deadline = Clock::now() + Millis(timeout_s + kReplyGraceSeconds);
  cv_.wait_until(lock, deadline, [&] { return pending.done || failure_ || stopping_ || connection_lost_; });
  pending_.erase(request_id);
  if (pending.done) {
    if (!pending.status.ok()) return pending.status;
    return std::move(pending.payload);
  }
  if (connection_lost_ && !failure_) {
    return Status(Code::kUnavailable, "lost the connection to the myplugin coordinator at " + options_.address +
                                          " during " + what);
  }
  if (failure_) return Status(failure_->code(), what + " was interrupted: " + failure_->message());
  if (stopping_) return FailedPrecondition("the coordination client is closing");
  return Status(Code::kDeadlineExceeded,
                "the myplugin coordinator at " + options_.address + " did not answer within " +
                    std::to_string(static_cast<int>(timeout_s + kReplyGraceSeconds)) + " s");
}

StatusOr<std::vector<RegisteredProcess>> CoordinationClient::Register(const std::string& local_topology) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply = Call("registration", Writer(MessageType::kRegister, rid)
                                         .U32(static_cast<uint32_t>(options_.num_processes))
                                         .U64(incarnation_)
                                         .Bytes(local_topology)
                                         .Finish(),
                                     rid, options_.initialization_timeout_s);
  if (!reply.ok()) return reply.status();
  Reader r(reply.value());
  MYPLUGIN_RETURN_IF_ERROR(ReplyStatus(r, MessageType::kTopology));
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  std::vector<RegisteredProcess> all(n);
  for (auto& p : all) {
    MYPLUGIN_RETURN_IF_ERROR(r.U64(&p.incarnation));
    MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&p.topology));
  }
  MYPLUGIN_RETURN_IF_ERROR(r.End());
  return all;
}

Status CoordinationClient::KeyValueSet(const std::string& key, const std::string& value) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply =
      Call("key_value_set '" + key + "'", Writer(MessageType::kKeyValueSet, rid).Bytes(key).Bytes(value).Finish(), rid, 0);
  return OkReply(reply);
}

StatusOr<std::string> CoordinationClient::KeyValueGet(const std::string& key, double timeout_s) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply =
      Call("key_value_get '" + key + "'", Writer(MessageType::kKeyValueGet, rid).Bytes(key).U64(WireMillis(timeout_s)).Finish(), rid, timeout_s);
  return ValueReply(reply);
}

StatusOr<std::string> CoordinationClient::KeyValueTryGet(const std::string& key) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply = Call("key_value_try_get '" + key + "'", Writer(MessageType::kKeyValueTryGet, rid).Bytes(key).Finish(), rid, 0);
  return ValueReply(reply);
}

Status CoordinationClient::KeyValueDelete(const std::string& key) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply = Call("key_value_delete '" + key + "'", Writer(MessageType::kKeyValueDelete, rid).Bytes(key).Finish(), rid, 0);
  return OkReply(reply);
}

StatusOr<std::vector<std::pair<std::string, std::string>>> CoordinationClient::KeyValueList(const std::string& prefix) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply = Call("key_value_list '" + prefix + "'", Writer(MessageType::kKeyValueList, rid).Bytes(prefix).Finish(), rid, 0);
  if (!reply.ok()) return reply.status();
  Reader r(reply.value());
  MYPLUGIN_RETURN_IF_ERROR(ReplyStatus(r, MessageType::kEntries));
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  std::vector<std::pair<std::string, std::string>> entries(n);
  for (auto& e : entries) {
    MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&e.first));
    MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&e.second));
  }
  return entries;
}

Status CoordinationClient::Barrier(const std::string& name, double timeout_s) {
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply =
      Call("barrier '" + name + "'", Writer(MessageType::kBarrier, rid).Bytes(name).U64(WireMillis(timeout_s)).Finish(), rid, timeout_s);
  return OkReply(reply);
}

Status CoordinationClient::Shutdown(double timeout_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  uint32_t rid = NextRequestId();
  StatusOr<std::string> reply = Call("the shutdown barrier", Writer(MessageType::kShutdown, rid).U64(WireMillis(timeout_s)).Finish(), rid, timeout_s);
  Status st = OkReply(reply);
  if (st.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shut_down_ = true;
    }
    StopThreads();
  }
  return st;
}

void CoordinationClient::ReportError(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ || shut_down_) return;
    // This process is the failure: it must not also act on the notice.
    failure_ = Status(Code::kAborted, "this process (" + std::to_string(options_.process_id) + ") failed: " + reason);
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(write_mu_);
  socket_.SendAll(Writer(MessageType::kReportError).Bytes(reason).Finish());
}

void CoordinationClient::FailThisProcess(const std::string& reason) {
  ReportError(reason);
  LogLine("myplugin: " + reason);
  if (options_.fate_sharing) {
    LogLine("myplugin: process " + std::to_string(options_.process_id) + " exits: it cannot make progress");
    ExitSoon();
  }
}

void CoordinationClient::ExitSoon() {
  double grace = options_.fate_sharing_grace_s;
  std::thread([grace] {
    std::this_thread::sleep_for(Millis(grace));
    _exit(kFateSharingExitCode);
  }).detach();
}

int CoordinationClient::AddFailureCallback(std::function<void(const Status&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  int id = next_callback_id_++;
  callbacks_[id] = std::move(callback);
  return id;
}

void CoordinationClient::RemoveFailureCallback(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.erase(id);
}

void CoordinationClient::AddPeerShutdownCallback(std::function<void(int)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  peer_shutdown_callbacks_.push_back(std::move(callback));
}

std::vector<int> CoordinationClient::finished_peers() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_peers_;
}

std::optional<Status> CoordinationClient::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void CoordinationClient::ReaderLoop() {
  std::string frame;
  while (true) {
    Status st = socket_.RecvFrame(&frame, -1);
    if (!st.ok()) {
      bool quiet;
      {
        std::lock_guard<std::mutex> lock(mu_);
        quiet = shut_down_ || stopping_ || shutdown_requested_;
        connection_lost_ = true;
      }
      cv_.notify_all();
      if (!quiet) {
        OnFailure(Status(Code::kUnavailable, "lost the connection to the myplugin coordinator at " +
                                                 options_.address + " (" + st.message() +
                                                 "): the coordinator process died or the network failed"));
      }
      return;
    }
    Reader r(frame);
    MessageType type;
    uint32_t rid;
    if (!r.Header(&type, &rid).ok()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_heard_ = Clock::now();
    }
    if (type == MessageType::kHeartbeat) continue;
    if (type == MessageType::kPeerShutdown) {
      uint32_t pid = 0;
      if (!r.U32(&pid).ok()) continue;
      std::vector<std::function<void(int)>> callbacks;
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_peers_.push_back(static_cast<int>(pid));
        callbacks = peer_shutdown_callbacks_;
      }
      for (auto& callback : callbacks) callback(static_cast<int>(pid));
      continue;
    }
    if (type == MessageType::kFailure) {
      uint32_t pid = 0;
      std::string reason;
      r.U32(&pid);
      r.Bytes(&reason);
      OnFailure(Status(Code::kAborted, "process " + std::to_string(pid) + " failed: " + reason));
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(rid);
    if (it != pending_.end()) {
      it->second->done = true;
      it->second->payload = frame;
    }
    cv_.notify_all();
  }
}

void CoordinationClient::HeartbeatLoop() {
  const std::string beat = Writer(MessageType::kHeartbeat).Finish();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !shut_down_ && !failure_ && !connection_lost_) {
    cv_.wait_for(lock, Millis(heartbeat_interval_s_));
    if (stopping_ || shut_down_ || failure_ || connection_lost_) break;
    double silent = std::chrono::duration<double>(Clock::now() - last_heard_).count();
    if (silent > heartbeat_timeout_s_) {
      lock.unlock();
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%g", heartbeat_timeout_s_);
      OnFailure(Status(Code::kUnavailable, "the myplugin coordinator at " + options_.address +
                                               " stopped responding: nothing heard for " + buf +
                                               " s (it is frozen, stopped or unreachable)"));
      return;
    }
    lock.unlock();
    {
      std::lock_guard<std::mutex> wlock(write_mu_);
      socket_.SendAll(beat);
    }
    lock.lock();
  }
}

void CoordinationClient::OnFailure(const Status& status) {
  std::map<int, std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ || shut_down_) return;
    failure_ = status;
    callbacks = callbacks_;
  }
  cv_.notify_all();
  const std::string me = std::to_string(options_.process_id);
  LogLine("myplugin: " + status.message() + " (seen by process " + me + ")");
  for (auto& [id, callback] : callbacks) callback(status);
  if (options_.fate_sharing) {
    LogLine("myplugin: process " + me +
            " exits because the job failed (fate-sharing; initialize with fate_sharing=False to handle the "
            "error yourself)");
    ExitSoon();
  }
}

}  // namespace myplugin::coordination

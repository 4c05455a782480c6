// One file (~425 lines) for one class, the client end of the coordination
// protocol: its connection, its requests, and its reader and heartbeat threads.
#include "coordination/client.h"

#include <unistd.h>

#include <cstdio>
#include <random>

#include "common/deadline.h"
#include "common/exit_guard.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "coordination/limits.h"
#include "coordination/messages.h"

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

// A reply frame as the message it should be, or the error it carries.
template <typename M>
StatusOr<M> Reply(const StatusOr<std::string>& reply) {
  if (!reply.ok()) return reply.status();
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(msg::PeekType(reply.value(), &type, &rid));
  if (type == MessageType::kError) {
    StatusOr<msg::Error> e = msg::Error::Decode(reply.value());
    if (!e.ok()) return e.status();
    return e.value().ToStatus();
  }
  if (type != M::kType) {
    return Internal(std::string("coordinator replied ") + MessageTypeName(type) + ", expected " +
                    MessageTypeName(M::kType));
  }
  return M::Decode(reply.value());
}

// A reply that carries nothing but success or an error.
Status OkReply(const StatusOr<std::string>& reply) { return Reply<msg::Ok>(reply).status(); }

// A reply that carries one value.
StatusOr<std::string> ValueReply(const StatusOr<std::string>& reply) {
  StatusOr<msg::Value> v = Reply<msg::Value>(reply);
  if (!v.ok()) return v.status();
  return std::move(v.value().value);
}

}  // namespace

StatusOr<std::unique_ptr<CoordinationClient>> CoordinationClient::Connect(const ClientOptions& options) {
  StatusOr<HostPort> hp = ParseHostPort(options.address);
  if (!hp.ok()) return hp.status();
  if (options.process_id < 0 || options.process_id >= options.num_processes) {
    return InvalidArgument("process id " + std::to_string(options.process_id) + " is out of range for " +
                           std::to_string(options.num_processes) + " processes");
  }
  const auto deadline = After(options.initialization_timeout_s);
  const uint64_t incarnation = NewIncarnation();
  std::unique_ptr<CoordinationClient> client;
  for (int backoff_ms = 10;; backoff_ms = std::min(backoff_ms * 2, 500)) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    StatusOr<Socket> socket = Socket::Connect(hp.value().host, hp.value().port, std::max(left, 0.0));
    if (!socket.ok()) return socket.status();
    client.reset(new CoordinationClient(options, socket.take(), incarnation));
    Status st = client->Hello();
    if (st.ok()) break;
    // A coordinator at its connection limit (peers that are not members
    // hold them: a scan, a flood) asks to come back later; its refusal can
    // also arrive as a reset, when it closed before reading our Hello.
    bool retry = st.code() == Code::kResourceExhausted || st.code() == Code::kUnavailable;
    if (!retry || Clock::now() + Millis(backoff_ms / 1000.0) >= deadline) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  }
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
  msg::Hello hello;
  hello.token = options_.token;
  hello.process_id = static_cast<uint32_t>(options_.process_id);
  hello.incarnation = incarnation_;
  MYPLUGIN_RETURN_IF_ERROR(socket_.SendAll(hello.Encode()));
  std::string frame;
  Status st = socket_.RecvFrame(&frame, static_cast<int>(std::min<uint64_t>(WireMillis(std::max(10.0, options_.initialization_timeout_s)), INT32_MAX)));
  if (!st.ok()) {
    return Status(st.code(), "no answer from the myplugin coordinator at " + options_.address + ": " + st.message());
  }
  StatusOr<msg::HelloOk> ok = Reply<msg::HelloOk>(frame);
  if (!ok.ok()) {
    return Status(ok.status().code(), "the myplugin coordinator at " + options_.address + " refused process " +
                                          std::to_string(options_.process_id) + ": " + ok.status().message());
  }
  const uint32_t num_processes = ok.value().num_processes;
  const uint64_t interval_ms = ok.value().heartbeat_interval_ms, timeout_ms = ok.value().heartbeat_timeout_ms;
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
                                               double timeout_s, bool during_failure) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ && !during_failure) return *failure_;
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
                                          sent.message()).WithFailure({FailureKind::kCoordination});
  }
  auto deadline = Clock::now() + Millis(timeout_s + kReplyGraceSeconds);
  cv_.wait_until(lock, deadline, [&] {
    return pending.done || (failure_ && !during_failure) || stopping_ || connection_lost_;
  });
  pending_.erase(request_id);
  if (pending.done) {
    if (!pending.status.ok()) return pending.status;
    return std::move(pending.payload);
  }
  if (connection_lost_ && !failure_) {
    return Status(Code::kUnavailable, "lost the connection to the myplugin coordinator at " + options_.address +
                                          " during " + what).WithFailure({FailureKind::kCoordination});
  }
  if (failure_ && !during_failure) {
    return Status(failure_->code(), what + " was interrupted: " + failure_->message()).WithFailureOf(*failure_);
  }
  if (stopping_) return FailedPrecondition("the coordination client is closing");
  return Status(Code::kDeadlineExceeded,
                "the myplugin coordinator at " + options_.address + " did not answer within " +
                    std::to_string(static_cast<int>(timeout_s + kReplyGraceSeconds)) + " s")
      .WithFailure({FailureKind::kCoordination});
}

StatusOr<msg::Membership> CoordinationClient::Register(const std::string& local_topology) {
  msg::Register m;
  m.request_id = NextRequestId();
  m.num_processes = static_cast<uint32_t>(options_.num_processes);
  m.incarnation = incarnation_;
  m.topology = local_topology;
  StatusOr<std::string> reply = Call("registration", m.Encode(), m.request_id, options_.initialization_timeout_s);
  MessageType type;
  uint32_t rid;
  if (reply.ok() && msg::PeekType(reply.value(), &type, &rid).ok() && type == MessageType::kMembership) {
    return Reply<msg::Membership>(reply);  // a restarted process, let in by an agreement
  }
  StatusOr<msg::Topology> t = Reply<msg::Topology>(reply);
  if (!t.ok()) return t.status();
  msg::Membership all;
  for (size_t i = 0; i < t.value().processes.size(); ++i) {
    all.members.push_back({static_cast<uint32_t>(i), t.value().processes[i].incarnation,
                           std::move(t.value().processes[i].topology)});
  }
  return all;
}

StatusOr<msg::Membership> CoordinationClient::Agree(double timeout_s) {
  msg::Agree m;
  m.request_id = NextRequestId();
  m.timeout_ms = WireMillis(timeout_s);
  return Reply<msg::Membership>(
      Call("the membership agreement", m.Encode(), m.request_id, timeout_s, /*during_failure=*/true));
}

uint64_t CoordinationClient::epoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

Status CoordinationClient::KeyValueSet(const std::string& key, const std::string& value) {
  const std::string what = "key_value_set of " + QuotedKey(key);
  // Checked here too: a frame over the limit would cost this process its
  // connection, and the job with it.
  MYPLUGIN_RETURN_IF_ERROR(CheckKeyValue(what, key, value));
  msg::KeyValueSet m;
  m.request_id = NextRequestId();
  m.key = key;
  m.value = value;
  return OkReply(Call(what, m.Encode(), m.request_id, 0));
}

Status CoordinationClient::KeyValueInsert(const std::string& key, const std::string& value) {
  const std::string what = "key_value_set of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKeyValue(what, key, value));
  msg::KeyValueInsert m;
  m.request_id = NextRequestId();
  m.key = key;
  m.value = value;
  return OkReply(Call(what, m.Encode(), m.request_id, 0));
}

StatusOr<int64_t> CoordinationClient::KeyValueIncrement(const std::string& key, int64_t increment) {
  const std::string what = "key_value_increment of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueIncrement m;
  m.request_id = NextRequestId();
  m.key = key;
  m.increment = increment;
  StatusOr<std::string> sum = ValueReply(Call(what, m.Encode(), m.request_id, 0));
  if (!sum.ok()) return sum.status();
  int64_t value;
  if (!ParseInt64(sum.value(), &value)) {
    return Status(Code::kInternal, what + ": the service's reply is not a decimal integer");
  }
  return value;
}

StatusOr<std::string> CoordinationClient::KeyValueGet(const std::string& key, double timeout_s) {
  const std::string what = "key_value_get of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueGet m;
  m.request_id = NextRequestId();
  m.key = key;
  m.timeout_ms = WireMillis(timeout_s);
  return ValueReply(Call(what, m.Encode(), m.request_id, timeout_s));
}

StatusOr<std::string> CoordinationClient::KeyValueTryGet(const std::string& key) {
  const std::string what = "key_value_try_get of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueTryGet m;
  m.request_id = NextRequestId();
  m.key = key;
  return ValueReply(Call(what, m.Encode(), m.request_id, 0));
}

Status CoordinationClient::KeyValueDelete(const std::string& key) {
  const std::string what = "key_value_delete of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueDelete m;
  m.request_id = NextRequestId();
  m.key = key;
  return OkReply(Call(what, m.Encode(), m.request_id, 0));
}

StatusOr<std::vector<std::pair<std::string, std::string>>> CoordinationClient::KeyValueList(const std::string& prefix) {
  const std::string what = "key_value_list of prefix " + QuotedKey(prefix);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, prefix));
  msg::KeyValueList m;
  m.request_id = NextRequestId();
  m.prefix = prefix;
  StatusOr<msg::Entries> e = Reply<msg::Entries>(Call(what, m.Encode(), m.request_id, 0));
  if (!e.ok()) return e.status();
  return std::move(e.value().entries);
}

Status CoordinationClient::Barrier(const std::string& name, double timeout_s) {
  const std::string what = "barrier '" + name + "'";
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, name));
  msg::Barrier m;
  m.request_id = NextRequestId();
  m.name = name;
  m.timeout_ms = WireMillis(timeout_s);
  return OkReply(Call(what, m.Encode(), m.request_id, timeout_s));
}

Status CoordinationClient::Shutdown(double timeout_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  msg::Shutdown m;
  m.request_id = NextRequestId();
  m.timeout_ms = WireMillis(timeout_s);
  Status st = OkReply(Call("the shutdown barrier", m.Encode(), m.request_id, timeout_s));
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
  msg::ReportError m;
  m.reason = reason.size() > kMaxReasonBytes ? reason.substr(0, kMaxReasonBytes) : reason;
  socket_.SendAll(m.Encode());
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
    // A flight recorder being written (it is what the user will read) is
    // finished first.
    WaitForExitGuards();
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
                                                 "): the coordinator process died or the network failed")
                      .WithFailure({FailureKind::kCoordination}));
      }
      return;
    }
    MessageType type;
    uint32_t rid;
    if (!msg::PeekType(frame, &type, &rid).ok()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_heard_ = Clock::now();
    }
    if (type == MessageType::kHeartbeat) continue;
    if (type == MessageType::kPeerShutdown) {
      StatusOr<msg::PeerShutdown> note = msg::PeerShutdown::Decode(frame);
      if (!note.ok()) continue;
      const uint32_t pid = note.value().process_id;
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
      StatusOr<msg::Failure> note = msg::Failure::Decode(frame);
      const std::string who = note.ok() ? "process " + std::to_string(note.value().process_id) : "a process";
      const std::string reason = note.ok() ? note.value().reason : "(a malformed failure notice)";
      Status failed(Code::kAborted, who + " failed: " + reason);
      if (note.ok()) failed = failed.WithFailure({FailureKind::kPeerFailure, {static_cast<int>(note.value().process_id)}});
      OnFailure(failed);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (type == MessageType::kMembership) {
      // Ended here, in the order frames arrive: a failure of the new epoch
      // that follows the verdict must not be cleared by it.
      StatusOr<msg::Membership> verdict = msg::Membership::Decode(frame);
      if (verdict.ok()) {
        failure_.reset();
        epoch_ = verdict.value().epoch;
      }
    }
    auto it = pending_.find(rid);
    if (it != pending_.end()) {
      it->second->done = true;
      it->second->payload = frame;
    }
    cv_.notify_all();
  }
}

void CoordinationClient::HeartbeatLoop() {
  const std::string beat = msg::Heartbeat().Encode();
  std::unique_lock<std::mutex> lock(mu_);
  // It goes on after a peer's failure: the survivors may agree to go on.
  while (!stopping_ && !shut_down_ && !connection_lost_) {
    cv_.wait_for(lock, Millis(heartbeat_interval_s_));
    if (stopping_ || shut_down_ || connection_lost_) break;
    double silent = std::chrono::duration<double>(Clock::now() - last_heard_).count();
    if (silent > heartbeat_timeout_s_) {
      lock.unlock();
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%g", heartbeat_timeout_s_);
      OnFailure(Status(Code::kUnavailable, "the myplugin coordinator at " + options_.address +
                                               " stopped responding: nothing heard for " + buf +
                                               " s (it is frozen, stopped or unreachable)")
                    .WithFailure({FailureKind::kCoordination}));
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

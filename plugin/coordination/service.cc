#include "coordination/service.h"

#include <algorithm>
#include <cstdio>
#include <system_error>
#include <thread>

#include "common/deadline.h"
#include "common/log.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

using Clock = std::chrono::steady_clock;

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

std::string ErrorFrame(uint32_t request_id, const Status& status) {
  return Writer(MessageType::kError, request_id)
      .U32(static_cast<uint32_t>(status.code()))
      .Bytes(status.message())
      .Finish();
}

void Log(const std::string& line) { LogLine("myplugin coordinator: " + line); }

// Compares in time that depends only on the lengths, not on where the
// first difference is: the token is the only secret a peer can probe.
bool SameSecret(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ (expected.empty() ? 0 : expected[i % expected.size()]));
  }
  return diff == 0;
}

constexpr char kShutdownBarrier[] = "__myplugin_shutdown__";
// A connection must say Hello within this time, or it is dropped.
constexpr int kHandshakeTimeoutMs = 10000;

}  // namespace

struct CoordinationService::Connection {
  Socket socket;
  std::mutex write_mu;
  std::string peer;
  int process_id = -1;
  std::thread thread;
  std::atomic<bool> finished{false};
};

double CoordinationService::HeartbeatIntervalSeconds(double heartbeat_timeout_s) {
  return std::clamp(heartbeat_timeout_s / 10.0, 0.05, 5.0);
}

StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Start(const std::string& bind_host, int port,
                                                                          const ServiceOptions& options) {
  if (options.num_processes < 1) {
    return InvalidArgument("num_processes must be at least 1, got " + std::to_string(options.num_processes));
  }
  if (options.heartbeat_timeout_s <= 0 || options.initialization_timeout_s <= 0) {
    return InvalidArgument("heartbeat and initialization timeouts must be positive");
  }
  StatusOr<Socket> listener = Socket::Listen(bind_host, port);
  if (!listener.ok()) return listener.status();
  int bound = listener.value().LocalPort();
  std::unique_ptr<CoordinationService> service(new CoordinationService(listener.take(), bound, options));
  service->accept_thread_ = std::thread([s = service.get()] { s->AcceptLoop(); });
  service->monitor_thread_ = std::thread([s = service.get()] { s->MonitorLoop(); });
  return service;
}

CoordinationService::CoordinationService(Socket listener, int port, const ServiceOptions& options)
    : options_(options), port_(port), listener_(std::move(listener)) {
  processes_.resize(options.num_processes);
  init_deadline_ = After(options.initialization_timeout_s);
}

CoordinationService::~CoordinationService() { Stop(); }

void CoordinationService::Stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  if (monitor_thread_.joinable()) monitor_thread_.join();
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns = connections_;
  }
  for (auto& c : conns) c->socket.ShutdownBoth();
  for (auto& c : conns) {
    if (c->thread.joinable()) c->thread.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  connections_.clear();
  for (Process& p : processes_) p.conn.reset();
  registration_waiters_.clear();
  key_waiters_.clear();
  barriers_.clear();
}

std::optional<Status> CoordinationService::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

int CoordinationService::failed_process() {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_process_;
}

bool CoordinationService::all_departed() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Process& p : processes_) {
    if (p.state != ProcessState::kDeparted) return false;
  }
  return true;
}

void CoordinationService::AcceptLoop() {
  int backoff_ms = 0;
  while (!stopping_) {
    StatusOr<Socket> s = listener_.Accept(100);
    // Reap the threads of connections that are gone, first: when accept
    // fails for want of descriptors, theirs are the ones to free.
    std::vector<std::shared_ptr<Connection>> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::stable_partition(connections_.begin(), connections_.end(),
                                      [](const auto& c) { return !c->finished; });
      finished.assign(it, connections_.end());
      connections_.erase(it, connections_.end());
    }
    for (auto& c : finished) {
      if (c->thread.joinable()) c->thread.join();
    }
    finished.clear();
    if (!s.ok()) {
      // EMFILE and the like persist until descriptors are freed: back off
      // (up to 1 s) rather than spin, and say so at a bounded rate.
      accept_errors_.Log("accept failed: " + s.status().message());
      backoff_ms = std::min(1000, backoff_ms == 0 ? 10 : backoff_ms * 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      continue;
    }
    backoff_ms = 0;
    if (!s.value().valid()) continue;
    auto conn = std::make_shared<Connection>();
    conn->socket = s.take();
    conn->peer = conn->socket.PeerName();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) break;
    try {
      conn->thread = std::thread([this, conn] { ServeConnection(conn); });
    } catch (const std::system_error& e) {
      // Out of threads (a pids limit): this connection is dropped, the
      // service goes on with the ones it has.
      accept_errors_.Log("cannot serve a connection from " + conn->peer + ": no thread (" + e.what() + ")");
      conn->socket.ShutdownBoth();
      continue;
    }
    connections_.push_back(conn);
  }
}

void CoordinationService::ServeConnection(std::shared_ptr<Connection> conn) {
  Status st = Handshake(conn);
  if (st.ok()) {
    std::string frame;
    while (!stopping_) {
      st = conn->socket.RecvFrame(&frame, -1);
      if (!st.ok()) break;
      st = Handle(conn, frame);
      if (!st.ok()) break;
    }
  }
  OnDisconnect(conn, st);
  conn->socket.ShutdownBoth();
  conn->finished = true;
}

Status CoordinationService::Handshake(const std::shared_ptr<Connection>& conn) {
  std::string frame;
  Status st = conn->socket.RecvFrame(&frame, kHandshakeTimeoutMs, kMaxHelloBytes);
  auto reject = [&](const Status& why) {
    rejections_.Log("rejected a connection from " + conn->peer + ": " + why.message());
    std::lock_guard<std::mutex> lock(conn->write_mu);
    conn->socket.SendAll(ErrorFrame(0, why));
    return why;
  };
  if (!st.ok()) return reject(st);
  Reader r(frame);
  MessageType type;
  uint32_t request_id;
  uint32_t magic = 0;
  uint16_t version = 0;
  std::string token;
  uint32_t process_id = 0;
  uint64_t incarnation = 0;
  if (!r.Header(&type, &request_id).ok() || type != MessageType::kHello || !r.U32(&magic).ok() ||
      magic != kMagic) {
    return reject(InvalidArgument("not a myplugin coordination client (bad hello)"));
  }
  if (!r.U16(&version).ok()) return reject(InvalidArgument("malformed hello"));
  if (version != kProtocolVersion) {
    return reject(FailedPrecondition("protocol version mismatch: the client speaks version " +
                                     std::to_string(version) + ", this coordinator speaks version " +
                                     std::to_string(kProtocolVersion) + " (are all processes running the same myplugin?)"));
  }
  if (!r.Bytes(&token).ok() || !r.U32(&process_id).ok() || !r.U64(&incarnation).ok() || !r.End().ok()) {
    return reject(InvalidArgument("malformed hello"));
  }
  if (!SameSecret(token, options_.token)) {
    return reject(Status(Code::kUnauthenticated, "wrong coordination token from " + conn->peer +
                                                      " (MYPLUGIN_COORDINATOR_TOKEN differs between processes?)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (process_id >= static_cast<uint32_t>(options_.num_processes)) {
    return reject(InvalidArgument("process id " + std::to_string(process_id) + " is out of range for a job of " +
                                  std::to_string(options_.num_processes) + " processes (ids 0.." +
                                  std::to_string(options_.num_processes - 1) + ")"));
  }
  if (failure_) return reject(*failure_);
  Process& p = processes_[process_id];
  if (p.state != ProcessState::kAbsent) {
    return reject(Status(Code::kAlreadyExists,
                         "process id " + std::to_string(process_id) + " is already taken (by " +
                             (p.conn ? p.conn->peer : std::string("a process that left")) +
                             "): two processes were given the same id"));
  }
  p.state = ProcessState::kConnected;
  p.conn = conn;
  p.incarnation = incarnation;
  p.last_heartbeat = Clock::now();
  conn->process_id = static_cast<int>(process_id);
  Send(conn, Writer(MessageType::kHelloOk, request_id)
                 .U32(static_cast<uint32_t>(options_.num_processes))
                 .U64(static_cast<uint64_t>(HeartbeatIntervalSeconds(options_.heartbeat_timeout_s) * 1000))
                 .U64(static_cast<uint64_t>(options_.heartbeat_timeout_s * 1000))
                 .Finish());
  return OkStatus();
}

Status CoordinationService::Handle(const std::shared_ptr<Connection>& conn, const std::string& frame) {
  Reader r(frame);
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(r.Header(&type, &rid));
  const int pid = conn->process_id;
  std::lock_guard<std::mutex> lock(mu_);
  Process& self = processes_[pid];
  self.last_heartbeat = Clock::now();  // any message proves liveness
  if (type == MessageType::kHeartbeat) return r.End();
  Waiter w{conn, rid};
  if (failure_) {
    ReplyError(w, *failure_);
    return OkStatus();
  }
  switch (type) {
    case MessageType::kRegister: {
      uint32_t num_processes;
      uint64_t incarnation;
      std::string topology;
      MYPLUGIN_RETURN_IF_ERROR(r.U32(&num_processes));
      MYPLUGIN_RETURN_IF_ERROR(r.U64(&incarnation));
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&topology));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      if (num_processes != static_cast<uint32_t>(options_.num_processes)) {
        ReplyError(w, InvalidArgument("process " + std::to_string(pid) + " believes the job has " +
                                      std::to_string(num_processes) + " processes, the coordinator was started for " +
                                      std::to_string(options_.num_processes)));
        return OkStatus();
      }
      if (self.state != ProcessState::kConnected) {
        ReplyError(w, FailedPrecondition("process " + std::to_string(pid) + " registered twice"));
        return OkStatus();
      }
      self.state = ProcessState::kRegistered;
      self.incarnation = incarnation;
      self.topology = topology;
      registration_waiters_.push_back(w);
      bool all = std::all_of(processes_.begin(), processes_.end(),
                             [](const Process& p) { return p.state == ProcessState::kRegistered; });
      if (all) {
        registration_complete_ = true;
        std::vector<Waiter> waiters;
        waiters.swap(registration_waiters_);
        for (const Waiter& each : waiters) {
          Writer t(MessageType::kTopology, each.request_id);
          t.U32(static_cast<uint32_t>(processes_.size()));
          for (const Process& p : processes_) t.U64(p.incarnation).Bytes(p.topology);
          Send(each.conn, t.Finish());
        }
      }
      return OkStatus();
    }
    case MessageType::kKeyValueSet: {
      std::string key, value;
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&value));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      kv_[key] = value;
      auto range = key_waiters_.equal_range(key);
      for (auto it = range.first; it != range.second; ++it) {
        Send(it->second.waiter.conn, Writer(MessageType::kValue, it->second.waiter.request_id).Bytes(value).Finish());
      }
      key_waiters_.erase(range.first, range.second);
      Send(conn, Writer(MessageType::kOk, rid).Finish());
      return OkStatus();
    }
    case MessageType::kKeyValueGet:
    case MessageType::kKeyValueTryGet: {
      std::string key;
      uint64_t timeout_ms = 0;
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
      if (type == MessageType::kKeyValueGet) MYPLUGIN_RETURN_IF_ERROR(r.U64(&timeout_ms));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      auto it = kv_.find(key);
      if (it != kv_.end()) {
        Send(conn, Writer(MessageType::kValue, rid).Bytes(it->second).Finish());
      } else if (type == MessageType::kKeyValueTryGet) {
        ReplyError(w, NotFound("key '" + key + "' is not set"));
      } else {
        key_waiters_.emplace(key, KeyWaiter{w, After(timeout_ms / 1000.0), timeout_ms / 1000.0});
      }
      return OkStatus();
    }
    case MessageType::kKeyValueDelete: {
      std::string key;
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      kv_.erase(key);
      Send(conn, Writer(MessageType::kOk, rid).Finish());
      return OkStatus();
    }
    case MessageType::kKeyValueList: {
      std::string prefix;
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&prefix));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      Writer reply(MessageType::kEntries, rid);
      std::vector<std::pair<std::string, std::string>> entries;
      for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
           ++it) {
        entries.emplace_back(*it);
      }
      reply.U32(static_cast<uint32_t>(entries.size()));
      for (const auto& e : entries) reply.Bytes(e.first).Bytes(e.second);
      Send(conn, reply.Finish());
      return OkStatus();
    }
    case MessageType::kBarrier: {
      std::string name;
      uint64_t timeout_ms;
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&name));
      MYPLUGIN_RETURN_IF_ERROR(r.U64(&timeout_ms));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      if (name == kShutdownBarrier) {
        ReplyError(w, InvalidArgument("barrier name '" + name + "' is reserved"));
        return OkStatus();
      }
      ArriveAtBarrier(name, pid, w, timeout_ms / 1000.0);
      return OkStatus();
    }
    case MessageType::kReportError: {
      std::string reason;
      MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&reason));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      DeclareFailure(pid, reason);
      return OkStatus();
    }
    case MessageType::kShutdown: {
      uint64_t timeout_ms;
      MYPLUGIN_RETURN_IF_ERROR(r.U64(&timeout_ms));
      MYPLUGIN_RETURN_IF_ERROR(r.End());
      self.state = ProcessState::kShuttingDown;
      FailBarriersWaitingFor(pid, "process " + std::to_string(pid) + " is shutting down (it finished its work)");
      // The others' collectives may be waiting for it: tell them.
      std::string note = Writer(MessageType::kPeerShutdown).U32(static_cast<uint32_t>(pid)).Finish();
      for (size_t i = 0; i < processes_.size(); ++i) {
        if (static_cast<int>(i) != pid && processes_[i].conn) Send(processes_[i].conn, note);
      }
      ArriveAtBarrier(kShutdownBarrier, pid, w, timeout_ms / 1000.0);
      return OkStatus();
    }
    default:
      return InvalidArgument(std::string("unexpected ") + MessageTypeName(type) + " message from process " +
                             std::to_string(pid));
  }
}

void CoordinationService::ArriveAtBarrier(const std::string& name, int pid, const Waiter& w, double timeout_s) {
  Barrier& b = barriers_[name];
  if (b.arrived.empty()) {
    b.deadline = After(timeout_s);
    b.timeout_s = timeout_s;
  }
  if (!b.arrived.insert(pid).second) {
    ReplyError(w, FailedPrecondition("process " + std::to_string(pid) + " arrived twice at barrier '" + name + "'"));
    return;
  }
  b.waiters.push_back(w);
  if (name != kShutdownBarrier) {
    for (int missing : Missing(b.arrived)) {
      ProcessState s = processes_[missing].state;
      if (s == ProcessState::kShuttingDown || s == ProcessState::kDeparted) {
        FailBarriersWaitingFor(missing, "process " + std::to_string(missing) + " is shutting down (it finished its work)");
        return;
      }
    }
  }
  CheckBarrier(name);
}

void CoordinationService::CheckBarrier(const std::string& name) {
  auto it = barriers_.find(name);
  if (it == barriers_.end() || static_cast<int>(it->second.arrived.size()) < options_.num_processes) return;
  for (const Waiter& w : it->second.waiters) Send(w.conn, Writer(MessageType::kOk, w.request_id).Finish());
  if (name == kShutdownBarrier) {
    for (Process& p : processes_) p.state = ProcessState::kDeparted;
  }
  barriers_.erase(it);
}

void CoordinationService::FailBarriersWaitingFor(int process_id, const std::string& why) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    Barrier& b = it->second;
    if (it->first != kShutdownBarrier && !b.arrived.count(process_id)) {
      Status st(Code::kFailedPrecondition, "barrier '" + it->first + "' cannot complete: " + why +
                                               " and will never arrive (arrived: " + ProcessList(b.arrived) + ")");
      for (const Waiter& w : b.waiters) ReplyError(w, st);
      it = barriers_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinationService::MonitorLoop() {
  const double interval = HeartbeatIntervalSeconds(options_.heartbeat_timeout_s);
  auto next_beat = Clock::now();
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mu_);
    auto now = Clock::now();
    if (now >= next_beat) {
      next_beat = now + std::chrono::milliseconds(static_cast<int64_t>(interval * 1000));
      std::string beat = Writer(MessageType::kHeartbeat).Finish();
      for (Process& p : processes_) {
        if (p.conn && p.state != ProcessState::kDeparted && p.state != ProcessState::kFailed) Send(p.conn, beat);
      }
    }
    if (failure_) continue;
    // Heartbeats: a process that stops talking is failed.
    for (size_t i = 0; i < processes_.size(); ++i) {
      Process& p = processes_[i];
      bool watched = p.state == ProcessState::kConnected || p.state == ProcessState::kRegistered ||
                     p.state == ProcessState::kShuttingDown;
      if (watched && now - p.last_heartbeat > std::chrono::milliseconds(
                                                  static_cast<int64_t>(options_.heartbeat_timeout_s * 1000))) {
        DeclareFailure(static_cast<int>(i), "stopped responding: no heartbeat for " +
                                                Seconds(options_.heartbeat_timeout_s) +
                                                " (the process is frozen, stopped or overloaded)");
        break;
      }
    }
    if (failure_) continue;
    if (!registration_complete_ && now > init_deadline_) {
      std::set<int> registered;
      for (size_t i = 0; i < processes_.size(); ++i) {
        if (processes_[i].state == ProcessState::kRegistered) registered.insert(static_cast<int>(i));
      }
      Status st(Code::kDeadlineExceeded,
                "initialization timed out after " + Seconds(options_.initialization_timeout_s) + ": processes " +
                    ProcessList(Missing(registered)) + " never registered (registered: " + ProcessList(registered) +
                    ")");
      failure_ = st;
      Log(st.message());
      FailAllWaiters(st);
      continue;
    }
    for (auto it = key_waiters_.begin(); it != key_waiters_.end();) {
      if (now > it->second.deadline) {
        ReplyError(it->second.waiter, Status(Code::kDeadlineExceeded, "key '" + it->first + "' was not set within " +
                                                                         Seconds(it->second.timeout_s)));
        it = key_waiters_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = barriers_.begin(); it != barriers_.end();) {
      Barrier& b = it->second;
      if (now > b.deadline) {
        std::string what = it->first == kShutdownBarrier ? std::string("the shutdown barrier") : "barrier '" + it->first + "'";
        Status st(Code::kDeadlineExceeded, what + " timed out after " + Seconds(b.timeout_s) + ": processes " +
                                               ProcessList(Missing(b.arrived)) + " did not arrive (arrived: " +
                                               ProcessList(b.arrived) + ")");
        for (const Waiter& w : b.waiters) ReplyError(w, st);
        it = barriers_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void CoordinationService::OnDisconnect(const std::shared_ptr<Connection>& conn, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  int pid = conn->process_id;
  if (pid < 0 || stopping_) return;
  Process& p = processes_[pid];
  if (p.conn != conn) return;
  p.conn.reset();
  switch (p.state) {
    case ProcessState::kDeparted:
    case ProcessState::kFailed:
      return;
    default:
      break;
  }
  std::string reason = why.code() == Code::kInvalidArgument
                           ? "sent a malformed message (" + why.message() + ")"
                           : "lost its connection without an orderly shutdown (it exited, crashed or was killed)";
  DeclareFailure(pid, reason);
}

void CoordinationService::DeclareFailure(int process_id, const std::string& reason) {
  processes_[process_id].state = ProcessState::kFailed;
  if (failure_) return;  // the first failure is the job's failure
  Status st(Code::kAborted, "process " + std::to_string(process_id) + " failed: " + reason);
  failure_ = st;
  failed_process_ = process_id;
  Log(st.message());
  std::string note = Writer(MessageType::kFailure).U32(static_cast<uint32_t>(process_id)).Bytes(reason).Finish();
  for (size_t i = 0; i < processes_.size(); ++i) {
    if (static_cast<int>(i) != process_id && processes_[i].conn) Send(processes_[i].conn, note);
  }
  FailAllWaiters(st);
}

void CoordinationService::FailAllWaiters(const Status& status) {
  // Each waiter hears what it was waiting for, and why that will not come.
  auto interrupted = [&](const std::string& what) {
    return Status(status.code(), what + " was interrupted: " + status.message());
  };
  for (const Waiter& w : registration_waiters_) ReplyError(w, interrupted("registration"));
  registration_waiters_.clear();
  for (auto& kw : key_waiters_) ReplyError(kw.second.waiter, interrupted("key_value_get '" + kw.first + "'"));
  key_waiters_.clear();
  for (auto& b : barriers_) {
    Status st = interrupted(b.first == kShutdownBarrier ? std::string("the shutdown barrier") : "barrier '" + b.first + "'");
    for (const Waiter& w : b.second.waiters) ReplyError(w, st);
  }
  barriers_.clear();
}

void CoordinationService::Send(const std::shared_ptr<Connection>& conn, const std::string& frame) {
  std::lock_guard<std::mutex> lock(conn->write_mu);
  // A failed send shows up as a lost connection in that connection's reader.
  if (!conn->socket.SendAll(frame).ok()) conn->socket.ShutdownBoth();
}

void CoordinationService::ReplyError(const Waiter& w, const Status& status) {
  Send(w.conn, ErrorFrame(w.request_id, status));
}

std::set<int> CoordinationService::Missing(const std::set<int>& present) const {
  std::set<int> missing;
  for (int i = 0; i < options_.num_processes; ++i) {
    if (!present.count(i)) missing.insert(i);
  }
  return missing;
}

std::string CoordinationService::ProcessList(const std::set<int>& ids) const {
  std::string s = "[";
  for (int id : ids) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(id);
  }
  return s + "]";
}

}  // namespace myplugin::coordination

// The members' life in the service (~520 lines): hello and registration,
// shutdown and failure, the clock. One file: each of these moves a member
// through the same states; the store, barriers and membership agreement
// have files of their own.
#include "coordination/service_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/deadline.h"
#include "common/log.h"
#include "coordination/messages.h"

namespace myplugin::coordination {
namespace {

using Clock = ServiceState::Clock;

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
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

std::string ErrorFrame(uint32_t request_id, const Status& status) {
  return msg::Error::From(request_id, status).Encode();
}

}  // namespace

void Outbox::Send(ConnectionId to, std::string frame) {
  frames.push_back({to, std::make_shared<const std::string>(std::move(frame))});
}

void Outbox::Send(ConnectionId to, const std::shared_ptr<const std::string>& frame) {
  frames.push_back({to, frame});
}

double ServiceState::HeartbeatIntervalSeconds(double heartbeat_timeout_s) {
  return std::clamp(heartbeat_timeout_s / 10.0, 0.05, 5.0);
}

double ServiceState::InitReportSeconds(double initialization_timeout_s) {
  return std::clamp(initialization_timeout_s / 5.0, 1.0, 30.0);
}

std::set<int> ServiceState::Registered() const {
  std::set<int> registered;
  for (size_t i = 0; i < processes_.size(); ++i) {
    if (processes_[i].state == ProcessState::kRegistered) registered.insert(static_cast<int>(i));
  }
  return registered;
}

double ServiceState::SendProgressTimeoutSeconds(double heartbeat_timeout_s) {
  return std::clamp(heartbeat_timeout_s / 2.0, 0.5, 30.0);
}

ServiceState::ServiceState(const ServiceOptions& options) : options_(options) {
  processes_.resize(std::max(options.num_processes, 1));
  for (int i = 0; i < options.num_processes; ++i) live_.insert(i);
  init_deadline_ = After(options.initialization_timeout_s);
  next_init_report_ = After(InitReportSeconds(options.initialization_timeout_s));
  next_beat_ = Clock::now();
}

bool ServiceState::all_departed() const {
  // A process left out of the membership by an agreement is not waited for.
  for (size_t i = 0; i < processes_.size(); ++i) {
    if (processes_[i].state != ProcessState::kDeparted && live_.count(static_cast<int>(i))) return false;
  }
  return !live_.empty();
}

int ServiceState::ProcessOf(ConnectionId conn) const {
  auto it = members_.find(conn);
  return it == members_.end() ? -1 : it->second;
}

Status ServiceState::OnHello(ConnectionId conn, const std::string& peer, const std::string& payload, Outbox& out) {
  auto reject = [&](const Status& why) {
    out.Send(conn, ErrorFrame(0, why));
    return why;
  };
  Reader r(payload);
  MessageType type;
  uint32_t rid = 0;
  uint32_t magic = 0;
  // Magic and version first, with their own errors: a peer of another
  // protocol or version must hear that, not "malformed".
  if (!r.Header(&type, &rid).ok() || type != MessageType::kHello || !r.U32(&magic).ok() || magic != kMagic) {
    return reject(InvalidArgument("not a myplugin coordination client (bad hello)"));
  }
  uint16_t version = 0;
  if (!r.U16(&version).ok()) return reject(InvalidArgument("malformed hello"));
  if (version != kProtocolVersion) {
    return reject(FailedPrecondition("protocol version mismatch: the client speaks version " +
                                     std::to_string(version) + ", this coordinator speaks version " +
                                     std::to_string(kProtocolVersion) + " (are all processes running the same myplugin?)"));
  }
  StatusOr<msg::Hello> hello = msg::Hello::Decode(payload);
  if (!hello.ok()) return reject(InvalidArgument("malformed hello"));
  const msg::Hello& h = hello.value();
  if (!SameSecret(h.token, options_.token)) {
    for (size_t a = 0; a < options_.earlier_tokens.size(); ++a) {
      if (SameSecret(h.token, options_.earlier_tokens[a])) {
        return reject(FailedPrecondition("process " + std::to_string(h.process_id) + " (" + peer + ") belongs to attempt " +
                                         std::to_string(a) + " of this job, which was ended; the job has restarted (attempt " +
                                         std::to_string(options_.attempt) + ")"));
      }
    }
    return reject(Status(Code::kUnauthenticated,
                         "wrong coordination token from " + peer + " (MYPLUGIN_COORDINATOR_TOKEN differs between processes?)"));
  }
  if (h.process_id >= static_cast<uint32_t>(options_.num_processes)) {
    return reject(InvalidArgument("process id " + std::to_string(h.process_id) + " is out of range for a job of " +
                                  std::to_string(options_.num_processes) + " processes (ids 0.." +
                                  std::to_string(options_.num_processes - 1) + ")"));
  }
  if (failure_ && !recoverable()) return reject(*failure_);
  if (members_.count(conn)) return reject(FailedPrecondition("a second hello on one connection"));
  Process& p = processes_[h.process_id];
  // A failed process whose connection is gone may come back (the launcher
  // started it again): it joins at the next agreement.
  const bool rejoins = recoverable() && p.state == ProcessState::kFailed && p.conn == 0;
  if (p.state != ProcessState::kAbsent && !rejoins) {
    return reject(Status(Code::kAlreadyExists, "process id " + std::to_string(h.process_id) + " is already taken (by " +
                                                   (p.conn ? p.peer : std::string("a process that left")) +
                                                   "): two processes were given the same id"));
  }
  p.state = ProcessState::kConnected;
  p.conn = conn;
  p.peer = peer;
  p.incarnation = h.incarnation;
  p.last_heartbeat = Clock::now();
  members_[conn] = static_cast<int>(h.process_id);
  msg::HelloOk ok;
  ok.request_id = h.request_id;
  ok.num_processes = static_cast<uint32_t>(options_.num_processes);
  ok.heartbeat_interval_ms = static_cast<uint64_t>(HeartbeatIntervalSeconds(options_.heartbeat_timeout_s) * 1000);
  ok.heartbeat_timeout_ms = static_cast<uint64_t>(options_.heartbeat_timeout_s * 1000);
  out.Send(conn, ok.Encode());
  return OkStatus();
}

Status ServiceState::OnFrame(ConnectionId conn, const std::string& payload, Outbox& out) {
  const int pid = ProcessOf(conn);
  if (pid < 0) return FailedPrecondition("a frame from a connection that has not said Hello");
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(msg::PeekType(payload, &type, &rid));
  Process& self = processes_[pid];
  self.last_heartbeat = Clock::now();  // any message proves liveness
  if (type == MessageType::kHeartbeat) return msg::Heartbeat::Decode(payload).status();
  if (self.state == ProcessState::kFailed && registration_complete_ && type != MessageType::kReportError) {
    ReplyError(Waiter{conn, rid}, FailedPrecondition("process " + std::to_string(pid) +
                                                     " was declared failed and is no longer a member of the job"), out);
    return OkStatus();
  }
  // After a failure only what leads out of it is served: the agreement, and
  // a restarted process's registration (it waits for that agreement).
  // (An agreement asked for after recovery became impossible hears why.)
  const bool recovery = type == MessageType::kAgree || (recoverable() && type == MessageType::kRegister);
  if (failure_ && type != MessageType::kReportError && !recovery) {
    ReplyError(Waiter{conn, rid}, *failure_, out);
    return OkStatus();
  }
  switch (type) {
    case MessageType::kRegister:
      return HandleRegister(pid, payload, out);
    case MessageType::kKeyValueSet:
    case MessageType::kKeyValueInsert:
    case MessageType::kKeyValueIncrement:
    case MessageType::kKeyValueGet:
    case MessageType::kKeyValueTryGet:
    case MessageType::kKeyValueDelete:
    case MessageType::kKeyValueList:
      return HandleKeyValue(pid, type, payload, out);
    case MessageType::kBarrier:
      return HandleBarrier(pid, payload, out);
    case MessageType::kShutdown:
      return HandleShutdown(pid, payload, out);
    case MessageType::kReportError:
      return HandleReportError(pid, payload, out);
    case MessageType::kAgree:
      return HandleAgree(pid, payload, out);
    default:
      return InvalidArgument(std::string("unexpected ") + MessageTypeName(type) + " message from process " +
                             std::to_string(pid));
  }
}

// --- registration ----------------------------------------------------------

Status ServiceState::HandleRegister(int pid, const std::string& payload, Outbox& out) {
  StatusOr<msg::Register> m = msg::Register::Decode(payload);
  if (!m.ok()) return m.status();
  Process& self = processes_[pid];
  Waiter w{self.conn, m.value().request_id};
  if (m.value().num_processes != static_cast<uint32_t>(options_.num_processes)) {
    ReplyError(w, InvalidArgument("process " + std::to_string(pid) + " believes the job has " +
                                  std::to_string(m.value().num_processes) +
                                  " processes, the coordinator was started for " +
                                  std::to_string(options_.num_processes)), out);
    return OkStatus();
  }
  if (self.state != ProcessState::kConnected) {
    ReplyError(w, FailedPrecondition("process " + std::to_string(pid) + " registered twice"), out);
    return OkStatus();
  }
  if (m.value().topology.size() > kMaxTopologyBytes) {
    ReplyError(w, Status(Code::kResourceExhausted, "the topology of process " + std::to_string(pid) + " (" +
                                                       ByteCount(m.value().topology.size()) + ") exceeds the " +
                                                       ByteCount(kMaxTopologyBytes) + " limit"), out);
    return OkStatus();
  }
  if (registration_complete_ && !recoverable()) {
    // Nobody will agree again (the job finished, or its failure is final):
    // a restarted process must not wait for an agreement that never comes.
    ReplyError(w, recovery_failure_ ? *recovery_failure_ : failure_ ? *failure_ : FailedPrecondition("the job ended"),
               out);
    return OkStatus();
  }
  self.state = ProcessState::kRegistered;
  self.incarnation = m.value().incarnation;
  self.topology = std::move(m.value().topology);
  if (registration_complete_) {
    AddJoiner(pid, w);
    CheckAgreement(out);  // one may be waiting for it
    return OkStatus();
  }
  registration_waiters_.push_back(w);
  bool all = std::all_of(processes_.begin(), processes_.end(),
                         [](const Process& p) { return p.state == ProcessState::kRegistered; });
  if (!all) return OkStatus();
  registration_complete_ = true;
  msg::Topology t;
  for (const Process& p : processes_) t.processes.push_back({p.incarnation, p.topology});
  for (const Waiter& each : registration_waiters_) {
    t.request_id = each.request_id;
    out.Send(each.conn, t.Encode());
  }
  registration_waiters_.clear();
  return OkStatus();
}

// --- shutdown and failure --------------------------------------------------

Status ServiceState::HandleShutdown(int pid, const std::string& payload, Outbox& out) {
  StatusOr<msg::Shutdown> m = msg::Shutdown::Decode(payload);
  if (!m.ok()) return m.status();
  Process& self = processes_[pid];
  Waiter w{self.conn, m.value().request_id};
  self.state = ProcessState::kShuttingDown;
  FailBarriersWaitingFor(pid, "process " + std::to_string(pid) + " is shutting down (it finished its work)", out);
  // The others' collectives may be waiting for it: tell them.
  msg::PeerShutdown note;
  note.process_id = static_cast<uint32_t>(pid);
  Broadcast(note.Encode(), pid, out);
  ArriveAtBarrier(kShutdownBarrier, pid, w, m.value().timeout_ms / 1000.0, out);
  return OkStatus();
}

Status ServiceState::HandleReportError(int pid, const std::string& payload, Outbox& out) {
  StatusOr<msg::ReportError> m = msg::ReportError::Decode(payload);
  if (!m.ok()) return m.status();
  DeclareFailure(pid, m.value().reason, out);
  return OkStatus();
}

int ServiceState::DetachLiveMember(ConnectionId conn) {
  auto member = members_.find(conn);
  if (member == members_.end()) return -1;
  const int pid = member->second;
  members_.erase(member);
  Process& p = processes_[pid];
  if (p.conn != conn) return -1;
  p.conn = 0;
  if (p.state == ProcessState::kDeparted || p.state == ProcessState::kFailed) return -1;
  return pid;
}

void ServiceState::OnDisconnect(ConnectionId conn, const Status& why, Outbox& out) {
  const int pid = DetachLiveMember(conn);
  if (pid < 0) return;
  std::string reason = why.code() == Code::kInvalidArgument
                           ? "sent a malformed message (" + why.message() + ")"
                           : "lost its connection without an orderly shutdown (it exited, crashed or was killed)";
  DeclareFailure(pid, reason, out);
}

void ServiceState::OnStoppedReading(ConnectionId conn, const std::string& detail, Outbox& out) {
  const int pid = DetachLiveMember(conn);
  if (pid < 0) return;
  DeclareFailure(pid, "stopped reading from the coordination service (" + detail + ")", out);
}

ConnectionId ServiceState::OnProcessEnded(int pid, const std::string& how, Outbox& out) {
  if (pid < 0 || pid >= options_.num_processes) return 0;
  Process& p = processes_[pid];
  // Never started or already free: a new process may take the id as it is.
  if (p.state == ProcessState::kAbsent) return 0;
  const ConnectionId conn = p.conn;
  if (conn) members_.erase(conn);
  p.conn = 0;
  if (p.state != ProcessState::kDeparted && p.state != ProcessState::kFailed) {
    DeclareFailure(pid, "its process ended " + how, out);
  }
  return conn;
}

std::vector<uint64_t> ServiceState::failures_per_process() const {
  std::vector<uint64_t> counts;
  counts.reserve(processes_.size());
  for (const Process& p : processes_) counts.push_back(p.failures);
  return counts;
}

void ServiceState::DeclareFailure(int process_id, const std::string& reason_in, Outbox& out) {
  processes_[process_id].state = ProcessState::kFailed;
  ++processes_[process_id].failures;
  std::string reason = reason_in.size() > kMaxReasonBytes ? reason_in.substr(0, kMaxReasonBytes) + "..." : reason_in;
  if (!live_.count(process_id)) {
    // A restarted process that had not been let in yet: the members never
    // depended on it.
    joiners_.erase(process_id);
    expected_joiners_.erase(process_id);
    Log("process " + std::to_string(process_id) + " failed before it rejoined: " + reason);
    CheckAgreement(out);
    return;
  }
  if (failure_) {
    // The first failure is the job's failure; a later one only shrinks
    // the agreement that may be under way.
    if (agreement_) agreement_->arrived.erase(process_id);
    CheckAgreement(out);
    return;
  }
  const Status st = Status(Code::kAborted, "process " + std::to_string(process_id) + " failed: " + reason)
                        .WithFailure({FailureKind::kPeerFailure, {process_id}, "", -1});
  failure_ = st;
  failed_process_ = process_id;
  Log(st.message());
  msg::Failure note;
  note.process_id = static_cast<uint32_t>(process_id);
  note.reason = reason;
  Broadcast(note.Encode(), process_id, out);
  FailAllWaiters(st, out);
  if (!recoverable()) {
    EndRecovery(st, out);
    return;
  }
  if (agreement_) agreement_->arrived.erase(process_id);
  CheckAgreement(out);
}

// --- time ------------------------------------------------------------------

void ServiceState::Tick(Clock::time_point now, Outbox& out) {
  if (now >= next_beat_) {
    next_beat_ = now + Millis(HeartbeatIntervalSeconds(options_.heartbeat_timeout_s));
    auto beat = std::make_shared<const std::string>(msg::Heartbeat().Encode());
    for (const Process& p : processes_) {
      if (p.conn && p.state != ProcessState::kDeparted && p.state != ProcessState::kFailed) out.Send(p.conn, beat);
    }
  }
  if (agreement_ && now > agreement_->deadline) {
    std::set<int> asked, missing;
    for (const auto& [pid, w] : agreement_->arrived) asked.insert(pid);
    for (int pid : live_) {
      if (AwaitedInAgreement(pid) && !asked.count(pid)) missing.insert(pid);
    }
    std::string late = missing.empty() ? "" : "processes " + ProcessList(missing) + " did not ask for it";
    if (!expected_joiners_.empty()) {
      late += (late.empty() ? "" : "; ") + std::string("restarted processes ") + ProcessList(expected_joiners_) +
              " did not register";
    }
    Status st(Code::kDeadlineExceeded, "the membership agreement timed out after " + Seconds(agreement_->timeout_s) +
                                           ": " + late + " (asked: " + ProcessList(asked) + "); the job cannot recover");
    Log(st.message());
    const int culprit = !missing.empty()            ? *missing.begin()
                        : !expected_joiners_.empty() ? *expected_joiners_.begin()
                                                     : -1;
    EndRecovery(st, out);
    if (!failure_) {
      failure_ = st;
      failed_process_ = culprit;
    }
    msg::Failure note;
    note.process_id = static_cast<uint32_t>(std::max(failed_process_, 0));
    note.reason = "the membership agreement failed: " + st.message();
    Broadcast(note.Encode(), -1, out);
    FailAllWaiters(*failure_, out);
    return;
  }
  // While the survivors of a failure may still agree, they are watched too.
  if (failure_ && !recoverable()) return;
  // Heartbeats: a process that stops talking is failed.
  for (size_t i = 0; i < processes_.size(); ++i) {
    Process& p = processes_[i];
    bool watched = p.state == ProcessState::kConnected || p.state == ProcessState::kRegistered ||
                   p.state == ProcessState::kShuttingDown;
    if (watched && now - p.last_heartbeat > Millis(options_.heartbeat_timeout_s)) {
      DeclareFailure(static_cast<int>(i), "stopped responding: no heartbeat for " +
                                              Seconds(options_.heartbeat_timeout_s) +
                                              " (the process is frozen, stopped or overloaded)", out);
      return;
    }
  }
  if (!registration_complete_ && now >= next_init_report_ && now <= init_deadline_) {
    // A job that waits long for its processes says who is still missing
    // while it waits, not only when it gives up.
    next_init_report_ = now + Millis(InitReportSeconds(options_.initialization_timeout_s));
    std::set<int> registered = Registered();
    const double left = std::chrono::duration<double>(init_deadline_ - now).count();
    Log("still waiting for processes " + ProcessList(Missing(registered)) + " to register (registered: " +
        ProcessList(registered) + "; " + Seconds(std::floor(left)) + " left of the initialization timeout)");
  }
  if (!registration_complete_ && now > init_deadline_) {
    std::set<int> registered = Registered();
    Status st(Code::kDeadlineExceeded,
              "initialization timed out after " + Seconds(options_.initialization_timeout_s) + ": processes " +
                  ProcessList(Missing(registered)) + " never registered (registered: " + ProcessList(registered) + ")");
    failure_ = st;
    Log(st.message());
    FailAllWaiters(st, out);
    return;
  }
  if (failure_) return;
  ExpireDeadlines(now, out);
}

void ServiceState::ExpireDeadlines(Clock::time_point now, Outbox& out) {
  for (auto it = key_waiters_.begin(); it != key_waiters_.end();) {
    if (now > it->second.deadline) {
      ReplyError(it->second.waiter, Status(Code::kDeadlineExceeded, "key '" + it->first + "' was not set within " +
                                                                       Seconds(it->second.timeout_s)), out);
      DropWaiter(it->second.waiter.conn);
      it = key_waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    Barrier& b = it->second;
    if (now > b.deadline) {
      // jax's service words it "Barrier timed out" first, and programs
      // (jax's own test harness) match that.
      std::string what = it->first == kShutdownBarrier ? std::string("the shutdown barrier") : "barrier '" + it->first + "'";
      Status st(Code::kDeadlineExceeded, "Barrier timed out: " + what + " waited " + Seconds(b.timeout_s) +
                                             "; processes " + ProcessList(Missing(b.arrived)) +
                                             " did not arrive (arrived: " + ProcessList(b.arrived) + ")");
      const std::set<int> missing = Missing(b.arrived);
      AnswerBarrier(b, st.WithFailure({FailureKind::kTimeout, {missing.begin(), missing.end()}, what, -1}), out);
      it = barriers_.erase(it);
    } else {
      ++it;
    }
  }
}

// --- helpers -----------------------------------------------------------------

void ServiceState::Broadcast(const std::string& frame, int except, Outbox& out) {
  auto shared = std::make_shared<const std::string>(frame);
  for (size_t i = 0; i < processes_.size(); ++i) {
    if (static_cast<int>(i) != except && processes_[i].conn) out.Send(processes_[i].conn, shared);
  }
}

void ServiceState::ReplyError(const Waiter& w, const Status& status, Outbox& out) {
  out.Send(w.conn, ErrorFrame(w.request_id, status));
}

void ServiceState::ReplyOk(const Waiter& w, Outbox& out) {
  msg::Ok ok;
  ok.request_id = w.request_id;
  out.Send(w.conn, ok.Encode());
}

size_t ServiceState::Waiting() const { return key_waiters_.size() + barriers_.size(); }

void ServiceState::AddWaiter(ConnectionId conn) { ++waiting_of_[conn]; }

void ServiceState::AnswerBarrier(const Barrier& b, const Status& st, Outbox& out) {
  for (const Waiter& w : b.waiters) {
    if (st.ok()) {
      ReplyOk(w, out);
    } else {
      ReplyError(w, st, out);
    }
    DropWaiter(w.conn);
  }
}

void ServiceState::DropWaiter(ConnectionId conn) {
  auto it = waiting_of_.find(conn);
  if (it != waiting_of_.end() && --it->second == 0) waiting_of_.erase(it);
}

size_t ServiceState::WaitingOf(ConnectionId conn) const {
  auto it = waiting_of_.find(conn);
  return it == waiting_of_.end() ? 0 : it->second;
}

Status ServiceState::CheckWaitingOf(ConnectionId conn, const std::string& what) const {
  if (WaitingOf(conn) < kMaxWaitingPerProcess) return OkStatus();
  return Status(Code::kResourceExhausted, what + ": process " + std::to_string(ProcessOf(conn)) + " already has " +
                                              std::to_string(kMaxWaitingPerProcess) +
                                              " blocking gets and barriers waiting (the per-process limit)");
}

std::set<int> ServiceState::Missing(const std::set<int>& present) const {
  std::set<int> missing;
  for (int i : live_) {
    if (!present.count(i)) missing.insert(i);
  }
  return missing;
}

std::string ServiceState::ProcessList(const std::set<int>& ids) const {
  std::string s = "[";
  for (int id : ids) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(id);
  }
  return s + "]";
}

std::string ServiceState::CheckInvariants() const {
  size_t bytes = 0;
  for (const auto& [k, v] : kv_) {
    if (k.size() > kMaxKeyBytes || v.size() > kMaxValueBytes) return "a key or value over its limit is stored";
    bytes += k.size() + v.size();
  }
  if (bytes != store_bytes_) return "store_bytes_ disagrees with the store";
  if (store_bytes_ > kMaxStoreBytes) return "the store is over its limit";
  if (Waiting() > kMaxWaiting + 1) return "more waiters than the limit";
  std::map<ConnectionId, size_t> waiting;
  for (const auto& kw : key_waiters_) ++waiting[kw.second.waiter.conn];
  for (const auto& b : barriers_) {
    for (const Waiter& w : b.second.waiters) ++waiting[w.conn];
  }
  if (waiting != waiting_of_) return "the waiters counted per connection disagree with the waiters";
  for (const auto& [conn, n] : waiting) {
    // + 1: the shutdown barrier is never refused.
    if (n > kMaxWaitingPerProcess + 1) return "a connection with more waiters than the per-process limit";
  }
  for (const auto& [conn, pid] : members_) {
    if (pid < 0 || pid >= static_cast<int>(processes_.size())) return "a member with a process id out of range";
    if (processes_[pid].conn != conn) return "a member whose process has another connection";
  }
  for (size_t i = 0; i < processes_.size(); ++i) {
    const Process& p = processes_[i];
    if (p.conn && ProcessOf(p.conn) != static_cast<int>(i)) return "a process whose connection is not its member";
    if (p.state == ProcessState::kAbsent && p.conn) return "an absent process with a connection";
  }
  if (failure_ && (!key_waiters_.empty() || !registration_waiters_.empty() || !barriers_.empty())) {
    return "waiters left after the job failed";
  }
  return "";
}

}  // namespace myplugin::coordination

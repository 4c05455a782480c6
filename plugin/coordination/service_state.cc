// The service's entry points and what its concerns share: construction, Hello,
// the dispatch of frames to the handlers, replies, waiter counts, invariants.
#include "coordination/service_state.h"

#include <algorithm>
#include <cstdio>

#include "common/deadline.h"
#include "common/log.h"
#include "coordination/messages.h"

namespace myplugin::coordination {
namespace {

using Clock = ServiceState::Clock;

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

std::string ServiceState::Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

void ServiceState::Log(const std::string& line) { LogLine("myplugin coordinator: " + line); }

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
  // Unique in the job (messages.h's Member): a restarted process is new.
  p.incarnation = p.incarnation == 0 ? static_cast<uint64_t>(h.process_id) + 1 : p.incarnation + static_cast<uint64_t>(options_.num_processes);
  p.last_heartbeat = Clock::now();
  next_liveness_check_ = std::min(next_liveness_check_, p.last_heartbeat + Millis(options_.heartbeat_timeout_s));
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
  if (Waiting() > MaxWaitingFor(options_.num_processes) + 1) return "more waiters than the limit";
  std::unordered_map<ConnectionId, size_t> waiting;
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

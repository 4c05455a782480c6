// How a member leaves or fails: ServiceState's handlers of Shutdown and ReportError,
// lost connections, ended processes, and the job's failure that follows (DeclareFailure).
#include "coordination/service_state.h"

#include <algorithm>

#include "coordination/messages.h"

namespace myplugin::coordination {
namespace {

// The coordinator's log says a failure's start and refers to the rest: each
// process's own output says it whole once (the culprit's traceback, the
// others' notice of the failure), and under myplugin-run the log shares the
// job's stream, where a collective mismatch's 300-character sentence
// appeared five times. 120 characters, as myplugin-run's summary.
constexpr size_t kLoggedReasonChars = 120;

std::string LoggedReason(const std::string& reason) {
  const std::string first = reason.substr(0, reason.find('\n'));
  if (first.size() <= kLoggedReasonChars && first.size() == reason.size()) return reason;
  size_t cut = std::min(first.size(), kLoggedReasonChars);
  while (cut > 0 && (static_cast<unsigned char>(first[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 boundary
  return first.substr(0, cut) + "… (in full in the processes' output)";
}

}  // namespace


// --- shutdown and failure --------------------------------------------------

Status ServiceState::HandleShutdown(int pid, const std::string& payload, Outbox& out) {
  StatusOr<msg::Shutdown> m = msg::Shutdown::Decode(payload);
  if (!m.ok()) return m.status();
  Process& self = processes_[pid];
  Waiter w{self.conn, m.value().request_id};
  self.state = ProcessState::kShuttingDown;
  shutting_down_.insert(pid);
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
  // Only ids of this job count, each once: a peer's list (millions of ids,
  // in a hostile frame) never grows the notice past the job, and costs one
  // pass.
  std::vector<uint32_t> blamed;
  std::vector<bool> seen(static_cast<size_t>(options_.num_processes), false);
  for (uint32_t id : m.value().blamed) {
    if (id < seen.size() && !seen[id]) {
      seen[id] = true;
      blamed.push_back(id);
    }
  }
  const bool first = !failure_;
  DeclareFailure(pid, m.value().reason, out, blamed);
  if (first && failure_ && failed_process_ == pid) failure_self_reported_ = true;
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

void ServiceState::DeclareFailure(int process_id, const std::string& reason_in, Outbox& out,
                                  const std::vector<uint32_t>& blamed) {
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
  std::vector<int> at_fault(blamed.begin(), blamed.end());
  if (at_fault.empty()) at_fault.push_back(process_id);
  const Status st = Status(Code::kAborted, "process " + std::to_string(process_id) + " failed: " + reason)
                        .WithFailure({FailureKind::kPeerFailure, at_fault, "", -1});
  failure_ = st;
  failed_process_ = process_id;
  Log(LoggedReason(st.message()));
  msg::Failure note;
  note.process_id = static_cast<uint32_t>(process_id);
  note.reason = reason;
  note.blamed = blamed;
  Broadcast(note.Encode(), process_id, out);
  FailAllWaiters(st, out);
  if (!recoverable()) {
    EndRecovery(st, out);
    return;
  }
  if (agreement_) agreement_->arrived.erase(process_id);
  CheckAgreement(out);
}

}  // namespace myplugin::coordination

// The service's membership agreement after a failure (in-place recovery):
// ServiceState's handler of Agree, and the verdict every survivor gets
// (service_state.h).
#include "coordination/service_state.h"

#include "common/deadline.h"
#include "common/log.h"
#include "coordination/messages.h"

namespace myplugin::coordination {

// --- membership agreement -----------------------------------------------------

Status ServiceState::HandleAgree(int pid, const std::string& payload, Outbox& out) {
  StatusOr<msg::Agree> m = msg::Agree::Decode(payload);
  if (!m.ok()) return m.status();
  Waiter w{processes_[pid].conn, m.value().request_id};
  if (!recoverable()) {
    const Status why = recovery_failure_ ? *recovery_failure_
                       : failure_         ? *failure_
                                          : FailedPrecondition("the job cannot agree on its membership before every "
                                                               "process registered");
    ReplyError(w, why, out);
    return OkStatus();
  }
  if (!live_.count(pid)) {
    ReplyError(w, FailedPrecondition("process " + std::to_string(pid) + " is not a member of the job"), out);
    return OkStatus();
  }
  if (!agreement_) {
    agreement_.emplace();
    const double timeout_s = m.value().timeout_ms / 1000.0;
    agreement_->deadline = After(timeout_s);
    agreement_->timeout_s = SaturatedSeconds(timeout_s);
  }
  if (!agreement_->arrived.emplace(pid, w).second) {
    ReplyError(w, FailedPrecondition("process " + std::to_string(pid) + " asked twice in one membership agreement"),
               out);
    return OkStatus();
  }
  CheckAgreement(out);
  return OkStatus();
}

bool ServiceState::AwaitedInAgreement(int pid) const {
  // A member that failed, or failed and is back (restarted, not yet let
  // in), is not waited for.
  const ProcessState state = processes_[pid].state;
  return state != ProcessState::kFailed && state != ProcessState::kConnected && !joiners_.count(pid);
}

void ServiceState::ExpectRejoin(int pid, bool expected, Outbox& out) {
  if (pid < 0 || pid >= options_.num_processes) return;
  if (expected) {
    expected_joiners_.insert(pid);
  } else {
    expected_joiners_.erase(pid);
  }
  CheckAgreement(out);
}

void ServiceState::AddJoiner(int pid, const Waiter& w) {
  expected_joiners_.erase(pid);
  joiners_[pid] = w;
  LogLine("myplugin coordinator: process " + std::to_string(pid) + " is back and joins at the next membership agreement");
}

void ServiceState::CheckAgreement(Outbox& out) {
  if (!agreement_) return;
  std::set<int> survivors;
  for (int pid : live_) {
    if (!AwaitedInAgreement(pid)) continue;
    if (!agreement_->arrived.count(pid)) return;  // still waiting for it
    survivors.insert(pid);
  }
  if (!expected_joiners_.empty()) return;  // a restarted process is on its way
  std::set<int> next = survivors;
  for (const auto& [pid, w] : joiners_) next.insert(pid);
  if (next.empty()) {
    agreement_.reset();
    return;
  }
  const bool changed = next != live_ || failure_;
  if (changed) ++epoch_;
  // The failed processes' ids are free again, for the launcher to restart
  // them; one still connected (it reported its own error) stays excluded.
  for (int pid : live_) {
    Process& p = processes_[pid];
    if (!next.count(pid) && p.state == ProcessState::kFailed && p.conn == 0) p.state = ProcessState::kAbsent;
  }
  live_ = next;
  // A barrier counts its arrivals from the epoch's members: count again.
  for (auto& [name, b] : barriers_) {
    b.live_arrived = 0;
    for (int pid : b.arrived) b.live_arrived += live_.count(pid);
  }
  failure_.reset();
  failed_process_ = -1;
  msg::Membership verdict;
  verdict.epoch = epoch_;
  for (int pid : live_) verdict.members.push_back({static_cast<uint32_t>(pid), processes_[pid].incarnation, processes_[pid].topology});
  if (changed) LogLine("myplugin coordinator: epoch " + std::to_string(epoch_) + ": members " + ProcessList(live_));
  std::vector<Waiter> answer;
  for (const auto& [pid, w] : agreement_->arrived) answer.push_back(w);
  for (const auto& [pid, w] : joiners_) answer.push_back(w);
  // Every member's topology is in it: encoded once per request id, not per member.
  std::map<uint32_t, std::shared_ptr<const std::string>> encoded;
  for (const Waiter& w : answer) {
    auto& frame = encoded[w.request_id];
    if (!frame) {
      verdict.request_id = w.request_id;
      frame = std::make_shared<const std::string>(verdict.Encode());
    }
    out.Send(w.conn, frame);
  }
  agreement_.reset();
  joiners_.clear();
}

void ServiceState::EndRecovery(const Status& why, Outbox& out) {
  terminal_ = true;
  if (!recovery_failure_) recovery_failure_ = why;
  if (agreement_) {
    for (const auto& [pid, w] : agreement_->arrived) ReplyError(w, why, out);
    agreement_.reset();
  }
  for (const auto& [pid, w] : joiners_) ReplyError(w, why, out);
  joiners_.clear();
  expected_joiners_.clear();
}

void ServiceState::FailAllWaiters(const Status& status, Outbox& out) {
  // Each waiter hears what it was waiting for, and why that will not come.
  auto interrupted = [&](const std::string& what) {
    return Status(status.code(), what + " was interrupted: " + status.message()).WithFailureOf(status);
  };
  for (const Waiter& w : registration_waiters_) ReplyError(w, interrupted("registration"), out);
  registration_waiters_.clear();
  for (auto& kw : key_waiters_) ReplyError(kw.second.waiter, interrupted("key_value_get '" + kw.first + "'"), out);
  key_waiters_.clear();
  for (auto& b : barriers_) {
    Status st = interrupted(b.first == kShutdownBarrier ? std::string("the shutdown barrier") : "barrier '" + b.first + "'");
    for (const Waiter& w : b.second.waiters) ReplyError(w, st, out);
  }
  barriers_.clear();
  waiting_of_.clear();
}

}  // namespace myplugin::coordination

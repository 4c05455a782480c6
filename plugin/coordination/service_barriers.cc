// The service's barriers: ServiceState's handling of arrivals, completion
// and the barriers a failed process leaves waiting (service_state.h).
#include "coordination/service_state.h"

#include <algorithm>

#include "common/deadline.h"
#include "coordination/messages.h"

namespace myplugin::coordination {

// --- barriers ---------------------------------------------------------------

Status ServiceState::HandleBarrier(int pid, const std::string& payload, Outbox& out) {
  StatusOr<msg::Barrier> m = msg::Barrier::Decode(payload);
  if (!m.ok()) return m.status();
  const std::string& name = m.value().name;
  Waiter w{processes_[pid].conn, m.value().request_id};
  if (name == kShutdownBarrier) {
    ReplyError(w, InvalidArgument("barrier name '" + name + "' is reserved"), out);
    return OkStatus();
  }
  Status fits = CheckKey("barrier " + QuotedKey(name), name);
  if (fits.ok()) fits = CheckWaitingOf(w.conn, "barrier " + QuotedKey(name));
  if (fits.ok() && !barriers_.count(name) && Waiting() >= MaxWaitingFor(options_.num_processes)) {
    fits = Status(Code::kResourceExhausted, "barrier " + QuotedKey(name) + ": " +
                                                std::to_string(MaxWaitingFor(options_.num_processes)) +
                                                " blocking gets and barriers are already waiting (the limit)");
  }
  if (!fits.ok()) {
    ReplyError(w, fits, out);
    return OkStatus();
  }
  ArriveAtBarrier(name, pid, w, m.value().timeout_ms / 1000.0, out);
  return OkStatus();
}

void ServiceState::ArriveAtBarrier(const std::string& name, int pid, const Waiter& w, double timeout_s, Outbox& out) {
  Barrier& b = barriers_[name];
  if (b.arrived.empty()) {
    b.deadline = After(timeout_s);
    next_expiry_ = std::min(next_expiry_, b.deadline);
    b.timeout_s = SaturatedSeconds(timeout_s);
  }
  if (!b.arrived.insert(pid).second) {
    ReplyError(w, FailedPrecondition("process " + std::to_string(pid) + " arrived twice at barrier '" + name + "'"), out);
    return;
  }
  if (live_.count(pid)) ++b.live_arrived;
  b.waiters.push_back(w);
  AddWaiter(w.conn);
  if (name != kShutdownBarrier) {
    // Only processes that asked to shut down can be such a missing one:
    // the job is not scanned at every arrival.
    for (int missing : shutting_down_) {
      ProcessState s = processes_[missing].state;
      if (live_.count(missing) && !b.arrived.count(missing) &&
          (s == ProcessState::kShuttingDown || s == ProcessState::kDeparted)) {
        FailBarriersWaitingFor(missing, "process " + std::to_string(missing) + " is shutting down (it finished its work)",
                               out);
        return;
      }
    }
  }
  CheckBarrier(name, out);
}

void ServiceState::CheckBarrier(const std::string& name, Outbox& out) {
  auto it = barriers_.find(name);
  // Arrivals are counted as they come: no scan of the job per arrival.
  if (it == barriers_.end() || it->second.live_arrived < live_.size()) return;
  AnswerBarrier(it->second, OkStatus(), out);
  if (name == kShutdownBarrier) {
    for (int pid : live_) processes_[pid].state = ProcessState::kDeparted;
    EndRecovery(FailedPrecondition("the job finished before this process could rejoin it"), out);
  }
  barriers_.erase(it);
}

void ServiceState::FailBarriersWaitingFor(int process_id, const std::string& why, Outbox& out) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    Barrier& b = it->second;
    if (it->first != kShutdownBarrier && !b.arrived.count(process_id)) {
      Status st(Code::kFailedPrecondition, "barrier '" + it->first + "' cannot complete: " + why +
                                               " and will never arrive (arrived: " + ProcessList(b.arrived) + ")");
      AnswerBarrier(b, st, out);
      it = barriers_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace myplugin::coordination

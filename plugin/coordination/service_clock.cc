// The service's clock: ServiceState::Tick sends heartbeats, fails silent members and
// ends whatever waited past its deadline (agreement, initialization, gets, barriers).
#include "coordination/service_state.h"

#include <algorithm>
#include <cmath>

#include "common/deadline.h"
#include "coordination/messages.h"

namespace myplugin::coordination {

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
  // Heartbeats: a process that stops talking is failed. The job is
  // scanned only when its quietest process can be due (a heartbeat only
  // moves its process's time on), so ticking costs nothing per process.
  if (now >= next_liveness_check_) {
    const auto timeout = Millis(options_.heartbeat_timeout_s);
    auto next = Clock::time_point::max();
    for (size_t i = 0; i < processes_.size(); ++i) {
      Process& p = processes_[i];
      bool watched = p.state == ProcessState::kConnected || p.state == ProcessState::kRegistered ||
                     p.state == ProcessState::kShuttingDown;
      if (!watched) continue;
      if (now - p.last_heartbeat > timeout) {
        next_liveness_check_ = now;  // the others at the next tick
        const std::string link = describe_link_ ? describe_link_(p.conn, static_cast<int>(i)) : "";
        DeclareFailure(static_cast<int>(i), "stopped responding: no heartbeat for " +
                                                Seconds(options_.heartbeat_timeout_s) +
                                                " (the process is frozen, stopped or overloaded)" +
                                                (link.empty() ? "" : "; " + link), out);
        return;
      }
      next = std::min(next, p.last_heartbeat + timeout);
    }
    next_liveness_check_ = next;
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
  // Thousands of processes may each wait in a get: the waiters are scanned
  // only once the earliest deadline among them has come.
  if (now <= next_expiry_) return;
  next_expiry_ = Clock::time_point::max();
  for (auto it = key_waiters_.begin(); it != key_waiters_.end();) {
    if (now > it->second.deadline) {
      ReplyError(it->second.waiter, Status(Code::kDeadlineExceeded, "key '" + it->first + "' was not set within " +
                                                                       Seconds(it->second.timeout_s)), out);
      DropWaiter(it->second.waiter.conn);
      it = key_waiters_.erase(it);
    } else {
      next_expiry_ = std::min(next_expiry_, it->second.deadline);
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
      next_expiry_ = std::min(next_expiry_, b.deadline);
      ++it;
    }
  }
}

}  // namespace myplugin::coordination

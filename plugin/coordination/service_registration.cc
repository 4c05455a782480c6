// The service's registration: ServiceState's handler of Register, which gathers
// every process's topology and answers all of them once the last has registered.
#include "coordination/service_state.h"

#include <map>
#include <memory>

#include "coordination/messages.h"

namespace myplugin::coordination {

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
  self.topology = std::move(m.value().topology);
  if (registration_complete_) {
    AddJoiner(pid, w);
    CheckAgreement(out);  // one may be waiting for it
    return OkStatus();
  }
  registration_waiters_.push_back(w);
  // Before registration completes a registered process stays registered
  // (a failure then ends the job), so a count says when all are: no scan
  // of every process at each registration.
  if (++registered_ < processes_.size()) return OkStatus();
  registration_complete_ = true;
  msg::Topology t;
  t.processes.reserve(processes_.size());
  for (const Process& p : processes_) t.processes.push_back({p.incarnation, p.topology});
  // The reply carries every topology, so it is encoded once per request id
  // (the clients' first request: nearly always one), never once per process.
  std::map<uint32_t, std::shared_ptr<const std::string>> encoded;
  for (const Waiter& each : registration_waiters_) {
    auto& frame = encoded[each.request_id];
    if (!frame) {
      t.request_id = each.request_id;
      frame = std::make_shared<const std::string>(t.Encode());
    }
    out.Send(each.conn, frame);
  }
  registration_waiters_.clear();
  return OkStatus();
}

}  // namespace myplugin::coordination

#include "coordination/runtime.h"

#include <chrono>
#include <cstdio>

#include "common/deadline.h"
#include "coordination/host_identity.h"
#include "coordination/network_address.h"

namespace myplugin::coordination {

Status DistributedRuntime::Initialize(const RuntimeOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (client_) {
    return FailedPrecondition("myplugin's distributed runtime is already initialized (process " +
                              std::to_string(client_->process_id()) + " of " +
                              std::to_string(client_->num_processes()) + ")");
  }
  if (options.coordinator_addresses.empty()) return InvalidArgument("no coordinator address");

  // Try each candidate address with a short deadline, until the overall one.
  using Clock = std::chrono::steady_clock;
  auto deadline = After(options.initialization_timeout_s);
  StatusOr<std::unique_ptr<CoordinationClient>> client = Status(Code::kUnknown, "not tried");
  do {
    for (const std::string& address : options.coordinator_addresses) {
      ClientOptions co;
      co.address = address;
      co.token = options.token;
      co.process_id = options.process_id;
      co.num_processes = options.num_processes;
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      co.initialization_timeout_s =
          options.coordinator_addresses.size() == 1 ? std::max(left, 0.1) : std::min(std::max(left, 0.1), 2.0);
      co.fate_sharing = options.fate_sharing;
      client = CoordinationClient::Connect(co);
      // Only an unreachable address is worth another try; a refusal is final.
      if (client.ok() || client.status().code() != Code::kDeadlineExceeded) break;
    }
  } while (!client.ok() && client.status().code() == Code::kDeadlineExceeded && Clock::now() < deadline);
  if (!client.ok() && client.status().code() == Code::kDeadlineExceeded) {
    const std::string& m = client.status().message();
    std::string addresses;
    for (const std::string& a : options.coordinator_addresses) addresses += (addresses.empty() ? "" : ", ") + a;
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", options.initialization_timeout_s);
    return Status(Code::kDeadlineExceeded, "cannot reach the myplugin coordinator at " + addresses + " within " +
                                               seconds + " s (last error: " + m.substr(m.rfind(": ") + 2) + ")");
  }
  if (!client.ok()) return client.status();

  ProcessInfo local = options.local;
  local.host_id = HostIdentity();
  local.address = options.advertise_address;
  if (local.address.empty() && !options.network_interface.empty()) {
    StatusOr<std::string> address = InterfaceAddress(options.network_interface, client.value()->local_address());
    if (!address.ok()) return address.status();
    local.address = address.take();
  }
  if (local.address.empty()) local.address = client.value()->local_address();
  if (local.address.empty()) {
    return Status(Code::kUnavailable, "cannot tell the local address of the connection to the coordinator; name "
                                      "one (or a network interface) for this process's peers");
  }
  StatusOr<msg::Membership> all = client.value()->Register(EncodeProcessInfo(local));
  if (!all.ok()) return all.status();
  client_ = client.take();
  Status adopted = Adopt(all.value());
  if (!adopted.ok()) client_.reset();
  return adopted;
}

Status DistributedRuntime::Adopt(const msg::Membership& membership) {
  std::vector<ProcessInfo> processes;
  std::vector<int> ids;
  std::vector<uint64_t> incarnations;
  int index = -1;
  for (const Member& m : membership.members) {
    StatusOr<ProcessInfo> info = DecodeProcessInfo(m.topology);
    if (!info.ok()) {
      return Status(info.status().code(), "process " + std::to_string(m.process_id) + " published a bad topology: " +
                                              info.status().message());
    }
    if (static_cast<int>(m.process_id) == client_->process_id()) index = static_cast<int>(ids.size());
    ids.push_back(static_cast<int>(m.process_id));
    incarnations.push_back(m.incarnation);
    processes.push_back(info.take());
  }
  if (index < 0) {
    return Internal("the membership of epoch " + std::to_string(membership.epoch) + " does not include process " +
                    std::to_string(client_->process_id()));
  }
  processes_ = std::move(processes);
  member_ids_ = std::move(ids);
  member_incarnations_ = std::move(incarnations);
  index_ = index;
  epoch_ = membership.epoch;
  return OkStatus();
}

StatusOr<msg::Membership> DistributedRuntime::Agree(double timeout_s) {
  std::shared_ptr<CoordinationClient> c = client();
  if (!c) return FailedPrecondition("myplugin's distributed runtime is not initialized");
  StatusOr<msg::Membership> verdict = c->Agree(timeout_s);  // without the lock: it blocks
  if (!verdict.ok()) return verdict.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (client_ != c) return FailedPrecondition("myplugin's distributed runtime shut down during the agreement");
  MYPLUGIN_RETURN_IF_ERROR(Adopt(verdict.value()));
  return verdict;
}

Status DistributedRuntime::Shutdown(double timeout_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!client_) return OkStatus();
  Status st = client_->Shutdown(timeout_s);
  client_.reset();
  processes_.clear();
  member_ids_.clear();
  member_incarnations_.clear();
  index_ = 0;
  epoch_ = 0;
  return st;
}

bool DistributedRuntime::initialized() {
  std::lock_guard<std::mutex> lock(mu_);
  return client_ != nullptr;
}

std::shared_ptr<CoordinationClient> DistributedRuntime::client() {
  std::lock_guard<std::mutex> lock(mu_);
  return client_;
}

int DistributedRuntime::process_id() {
  std::lock_guard<std::mutex> lock(mu_);
  return client_ ? index_ : 0;
}

int DistributedRuntime::num_processes() {
  std::lock_guard<std::mutex> lock(mu_);
  return client_ ? static_cast<int>(member_ids_.size()) : 1;
}

std::vector<int> DistributedRuntime::member_ids() {
  std::lock_guard<std::mutex> lock(mu_);
  return member_ids_;
}

std::vector<uint64_t> DistributedRuntime::member_incarnations() {
  std::lock_guard<std::mutex> lock(mu_);
  return member_incarnations_;
}

uint64_t DistributedRuntime::epoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

MembershipSnapshot DistributedRuntime::membership() {
  std::lock_guard<std::mutex> lock(mu_);
  return MembershipSnapshot{epoch_, member_ids_, client_ ? index_ : 0};
}

std::vector<ProcessInfo> DistributedRuntime::processes() {
  std::lock_guard<std::mutex> lock(mu_);
  return processes_;
}

}  // namespace myplugin::coordination

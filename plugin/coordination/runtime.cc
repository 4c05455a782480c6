#include "coordination/runtime.h"

#include <chrono>
#include <cstdio>

#include "common/deadline.h"
#include "coordination/host_identity.h"
#include "coordination/network_address.h"

namespace myplugin::coordination {

DistributedRuntime& DistributedRuntime::Get() {
  // Leaked on purpose: the client's threads may still run during static
  // destruction, and the process is going away then anyway.
  static DistributedRuntime* runtime = new DistributedRuntime;
  return *runtime;
}

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
  StatusOr<std::vector<RegisteredProcess>> all = client.value()->Register(EncodeProcessInfo(local));
  if (!all.ok()) return all.status();
  std::vector<ProcessInfo> processes;
  for (size_t i = 0; i < all.value().size(); ++i) {
    StatusOr<ProcessInfo> info = DecodeProcessInfo(all.value()[i].topology);
    if (!info.ok()) {
      return Status(info.status().code(), "process " + std::to_string(i) + " published a bad topology: " +
                                              info.status().message());
    }
    processes.push_back(info.take());
  }
  client_ = client.take();
  processes_ = std::move(processes);
  return OkStatus();
}

Status DistributedRuntime::Shutdown(double timeout_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!client_) return OkStatus();
  Status st = client_->Shutdown(timeout_s);
  client_.reset();
  processes_.clear();
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
  return client_ ? client_->process_id() : 0;
}

int DistributedRuntime::num_processes() {
  std::lock_guard<std::mutex> lock(mu_);
  return client_ ? client_->num_processes() : 1;
}

std::vector<ProcessInfo> DistributedRuntime::processes() {
  std::lock_guard<std::mutex> lock(mu_);
  return processes_;
}

}  // namespace myplugin::coordination

// The client's side of a failure: telling the service this process fails, learning
// the job's failure (OnFailure), its callbacks, and fate-sharing's exit.
#include "coordination/client.h"

#include <unistd.h>

#include "common/deadline.h"
#include "common/exit_guard.h"
#include "common/log.h"
#include "coordination/limits.h"
#include "coordination/messages.h"

namespace myplugin::coordination {

void CoordinationClient::ReportError(const std::string& reason, const std::vector<int>& blamed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ || shut_down_) return;
    // This process is the failure: it must not also act on the notice.
    failure_ = Status(Code::kAborted, "this process (" + std::to_string(options_.process_id) + ") failed: " + reason);
    if (!blamed.empty()) failure_ = failure_->WithFailure({FailureKind::kPeerFailure, blamed});
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(write_mu_);
  msg::ReportError m;
  m.reason = reason.size() > kMaxReasonBytes ? reason.substr(0, kMaxReasonBytes) : reason;
  m.blamed.assign(blamed.begin(), blamed.end());
  socket_.SendAll(m.Encode());
}

void CoordinationClient::FailThisProcess(const std::string& reason, const std::vector<int>& blamed) {
  ReportError(reason, blamed);
  LogLine("myplugin: " + reason);
  if (options_.fate_sharing) {
    LogLine("myplugin: process " + std::to_string(options_.process_id) + " exits: it cannot make progress");
    ExitSoon();
  }
}

void CoordinationClient::ExitSoon() {
  double grace = options_.fate_sharing_grace_s;
  std::thread([grace] {
    std::this_thread::sleep_for(Millis(grace));
    // A flight recorder being written (it is what the user will read) is
    // finished first.
    WaitForExitGuards();
    _exit(kFateSharingExitCode);
  }).detach();
}

int CoordinationClient::AddFailureCallback(std::function<void(const Status&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  int id = next_callback_id_++;
  callbacks_[id] = std::move(callback);
  return id;
}

void CoordinationClient::RemoveFailureCallback(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.erase(id);
}

void CoordinationClient::AddPeerShutdownCallback(std::function<void(int)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  peer_shutdown_callbacks_.push_back(std::move(callback));
}

std::vector<int> CoordinationClient::finished_peers() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_peers_;
}

std::optional<Status> CoordinationClient::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void CoordinationClient::OnFailure(const Status& status) {
  std::map<int, std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ || shut_down_) return;
    failure_ = status;
    callbacks = callbacks_;
  }
  cv_.notify_all();
  const std::string me = std::to_string(options_.process_id);
  LogLine("myplugin: " + status.message() + " (seen by process " + me + ")");
  for (auto& [id, callback] : callbacks) callback(status);
  if (options_.fate_sharing) {
    LogLine("myplugin: process " + me +
            " exits because the job failed (fate-sharing; initialize with fate_sharing=False to handle the "
            "error yourself)");
    ExitSoon();
  }
}

}  // namespace myplugin::coordination

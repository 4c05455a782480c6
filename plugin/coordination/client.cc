// The client's connection: Connect (with its retries), Call, which sends a request
// and waits for its reply, and the reader and heartbeat threads, their start and stop.
#include "coordination/client.h"


#include <cstdio>

#include "common/deadline.h"
#include "common/fault_delays.h"
#include "common/tcp_links.h"
#include "coordination/messages.h"

namespace myplugin::coordination {
namespace {

using Clock = std::chrono::steady_clock;

// Extra time a client gives the service beyond the service's own deadline
// for a blocking call, before it concludes the service is not answering.
constexpr double kReplyGraceSeconds = 10;

}  // namespace

StatusOr<std::unique_ptr<CoordinationClient>> CoordinationClient::Connect(const ClientOptions& options) {
  StatusOr<HostPort> hp = ParseHostPort(options.address);
  if (!hp.ok()) return hp.status();
  if (options.process_id < 0 || options.process_id >= options.num_processes) {
    return InvalidArgument("process id " + std::to_string(options.process_id) + " is out of range for " +
                           std::to_string(options.num_processes) + " processes");
  }
  const auto deadline = After(options.initialization_timeout_s);
  std::unique_ptr<CoordinationClient> client;
  for (int backoff_ms = 10;; backoff_ms = std::min(backoff_ms * 2, 500)) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    StatusOr<Socket> socket = Socket::Connect(hp.value().host, hp.value().port, std::max(left, 0.0));
    if (!socket.ok()) return socket.status();
    client.reset(new CoordinationClient(options, socket.take()));
    Status st = client->Hello();
    if (st.ok()) break;
    // A coordinator at its connection limit (peers that are not members
    // hold them: a scan, a flood) asks to come back later; its refusal can
    // also arrive as a reset, when it closed before reading our Hello.
    bool retry = st.code() == Code::kResourceExhausted || st.code() == Code::kUnavailable;
    if (!retry || Clock::now() + Millis(backoff_ms / 1000.0) >= deadline) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  }
  client->last_heard_ = Clock::now();
  client->reader_ = std::thread([c = client.get()] { c->ReaderLoop(); });
  client->heartbeat_ = std::thread([c = client.get()] { c->HeartbeatLoop(); });
  return client;
}

CoordinationClient::CoordinationClient(const ClientOptions& options, Socket socket)
    : options_(options), socket_(std::move(socket)) {}

CoordinationClient::~CoordinationClient() { StopThreads(); }

void CoordinationClient::StopThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  socket_.ShutdownBoth();
  if (reader_.joinable()) reader_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
}

StatusOr<std::string> CoordinationClient::Call(const std::string& what, std::string frame, uint32_t request_id,
                                               double timeout_s, bool during_failure) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ && !during_failure) return *failure_;
    if (shut_down_) return FailedPrecondition("the coordination client has shut down");
    pending_[request_id] = &pending;
  }
  Status sent;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    sent = socket_.SendAll(frame);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!sent.ok()) {
    pending_.erase(request_id);
    return Status(Code::kUnavailable, "cannot reach the myplugin coordinator at " + options_.address + ": " +
                                          sent.message()).WithFailure({FailureKind::kCoordination});
  }
  auto deadline = Clock::now() + Millis(timeout_s + kReplyGraceSeconds);
  cv_.wait_until(lock, deadline, [&] {
    return pending.done || (failure_ && !during_failure) || stopping_ || connection_lost_;
  });
  pending_.erase(request_id);
  if (pending.done) {
    if (!pending.status.ok()) return pending.status;
    return std::move(pending.payload);
  }
  if (connection_lost_ && !failure_) {
    return Status(Code::kUnavailable, "lost the connection to the myplugin coordinator at " + options_.address +
                                          " during " + what).WithFailure({FailureKind::kCoordination});
  }
  if (failure_ && !during_failure) {
    return Status(failure_->code(), what + " was interrupted: " + failure_->message()).WithFailureOf(*failure_);
  }
  if (stopping_) return FailedPrecondition("the coordination client is closing");
  return Status(Code::kDeadlineExceeded,
                "the myplugin coordinator at " + options_.address + " did not answer within " +
                    std::to_string(static_cast<int>(timeout_s + kReplyGraceSeconds)) + " s")
      .WithFailure({FailureKind::kCoordination});
}

void CoordinationClient::ReaderLoop() {
  std::string frame;
  while (true) {
    Status st = socket_.RecvFrame(&frame, -1);
    if (!st.ok()) {
      bool quiet;
      {
        std::lock_guard<std::mutex> lock(mu_);
        quiet = shut_down_ || stopping_ || shutdown_requested_;
        connection_lost_ = true;
      }
      cv_.notify_all();
      if (!quiet) {
        OnFailure(Status(Code::kUnavailable, "lost the connection to the myplugin coordinator at " +
                                                 options_.address + " (" + st.message() +
                                                 "): the coordinator process died or the network failed")
                      .WithFailure({FailureKind::kCoordination}));
      }
      return;
    }
    MessageType type;
    uint32_t rid;
    if (!msg::PeekType(frame, &type, &rid).ok()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_heard_ = Clock::now();
    }
    if (type == MessageType::kHeartbeat) continue;
    if (type == MessageType::kPeerShutdown) {
      StatusOr<msg::PeerShutdown> note = msg::PeerShutdown::Decode(frame);
      if (!note.ok()) continue;
      const uint32_t pid = note.value().process_id;
      std::vector<std::function<void(int)>> callbacks;
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_peers_.push_back(static_cast<int>(pid));
        callbacks = peer_shutdown_callbacks_;
      }
      for (auto& callback : callbacks) callback(static_cast<int>(pid));
      continue;
    }
    if (type == MessageType::kFailure) {
      FaultDelay(FaultPoint::kFailureNotice);
      StatusOr<msg::Failure> note = msg::Failure::Decode(frame);
      const std::string who = note.ok() ? "process " + std::to_string(note.value().process_id) : "a process";
      const std::string reason = note.ok() ? note.value().reason : "(a malformed failure notice)";
      Status failed(Code::kAborted, who + " failed: " + reason);
      if (note.ok()) {
        std::vector<int> at_fault(note.value().blamed.begin(), note.value().blamed.end());
        if (at_fault.empty()) at_fault.push_back(static_cast<int>(note.value().process_id));
        failed = failed.WithFailure({FailureKind::kPeerFailure, at_fault});
      }
      OnFailure(failed);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (type == MessageType::kMembership) {
      // Ended here, in the order frames arrive: a failure of the new epoch
      // that follows the verdict must not be cleared by it.
      StatusOr<msg::Membership> verdict = msg::Membership::Decode(frame);
      if (verdict.ok()) {
        failure_.reset();
        epoch_ = verdict.value().epoch;
      }
    }
    auto it = pending_.find(rid);
    if (it != pending_.end()) {
      it->second->done = true;
      it->second->payload = frame;
    }
    cv_.notify_all();
  }
}

void CoordinationClient::HeartbeatLoop() {
  const std::string beat = msg::Heartbeat().Encode();
  std::unique_lock<std::mutex> lock(mu_);
  // It goes on after a peer's failure: the survivors may agree to go on.
  while (!stopping_ && !shut_down_ && !connection_lost_) {
    cv_.wait_for(lock, Millis(heartbeat_interval_s_));
    if (stopping_ || shut_down_ || connection_lost_) break;
    double silent = std::chrono::duration<double>(Clock::now() - last_heard_).count();
    if (silent > heartbeat_timeout_s_) {
      lock.unlock();
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%g", heartbeat_timeout_s_);
      // Whether its host still acknowledges our heartbeats: a frozen
      // coordinator, or a lost link.
      const std::string link = DescribeTcpSocket("the coordinator", socket_.fd());
      OnFailure(Status(Code::kUnavailable, "the myplugin coordinator at " + options_.address +
                                               " stopped responding: nothing heard for " + buf +
                                               " s (it is frozen, stopped or unreachable)" +
                                               (link.empty() ? "" : "; " + link))
                    .WithFailure({FailureKind::kCoordination}));
      return;
    }
    lock.unlock();
    {
      std::lock_guard<std::mutex> wlock(write_mu_);
      socket_.SendAll(beat);
    }
    lock.lock();
  }
}

}  // namespace myplugin::coordination

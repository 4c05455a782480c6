// The service's blocking threads: a reader and a writer per member (ServeMember starts
// them), the monitor that ticks the state, and Deliver, which queues the state's frames.
#include "coordination/service.h"

#include <chrono>
#include <cstdio>
#include <system_error>
#include <thread>

#include "coordination/service_io.h"

namespace myplugin::coordination {

void CoordinationService::ServeMember(const std::shared_ptr<Connection>& conn) {
  try {
    conn->writer = std::thread([this, conn] { WriteLoop(conn); });
    conn->reader = std::thread([this, conn] { ReadLoop(conn); });
  } catch (const std::system_error& e) {
    // Out of threads (a pids limit): this member is dropped (and so
    // failed), the service goes on with the ones it has.
    accept_errors_.Log("cannot serve process connection from " + conn->peer + ": no thread (" + e.what() + ")");
    Disconnect(conn, Status(Code::kUnavailable, std::string("no thread to serve it (") + e.what() + ")"));
    conn->finished = true;
    ++finished_;
  }
}

void CoordinationService::Disconnect(const std::shared_ptr<Connection>& conn, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    state_.OnDisconnect(conn->id, why, out);
    Deliver(out);
  }
  conn->Close();
}

void CoordinationService::ReadLoop(const std::shared_ptr<Connection>& conn) {
  std::string frame;
  Status st;
  while (st.ok()) {
    st = conn->socket.RecvFrame(&frame, -1);
    if (!st.ok()) break;
    // Stopping: what a peer still sends is read (see Stop) but not acted on.
    if (stopping_) continue;
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    st = state_.OnFrame(conn->id, frame, out);
    Deliver(out);
  }
  // Stopping: Stop closes the connection once its last replies are out.
  if (!stopping_) Disconnect(conn, st);
  conn->finished = true;
  ++finished_;
}

void CoordinationService::WriteLoop(const std::shared_ptr<Connection>& conn) {
  std::string stopped;
  while (auto frame = conn->queue.Pop()) {
    Status st = conn->socket.SendAll(*frame);
    if (!st.ok()) {
      if (st.code() == Code::kDeadlineExceeded) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%zu bytes queued, no progress for %g s", conn->queue.bytes(),
                      ServiceState::SendProgressTimeoutSeconds(options_.heartbeat_timeout_s));
        stopped = buf;
      }
      break;
    }
    conn->queue.Sent(frame->size());
  }
  if (conn->queue.overflowed()) {
    stopped = "over " + ByteCount(kMaxSendQueueBytes) + " queued: it reads slower than the job writes to it";
  }
  if (!stopped.empty() && !stopping_) {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    state_.OnStoppedReading(conn->id, stopped, out);
    Deliver(out);
  }
  // The reader then sees the connection end, and reports it if nothing did.
  conn->socket.ShutdownBoth();
}

void CoordinationService::Deliver(Outbox& out) {
  for (Outbox::Frame& f : out.frames) {
    auto it = connections_.find(f.to);
    if (it != connections_.end()) it->second->queue.Push(std::move(f.bytes));
  }
  out.frames.clear();
}

void CoordinationService::MonitorLoop() {
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    state_.Tick(ServiceState::Clock::now(), out);
    Deliver(out);
  }
}

}  // namespace myplugin::coordination

#include "coordination/service.h"

#include <chrono>
#include <functional>
#include <thread>

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "common/log.h"
#include "coordination/messages.h"
#include "coordination/send_queue.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

// A connection must say Hello within this time, or it is dropped.
constexpr int kHandshakeTimeoutMs = 10000;
// What a refused or rejected peer gets to read its error frame: it is not
// a member, and its thread is the only one that waits.
constexpr double kRejectSendTimeoutS = 1;

std::string ErrorFrame(const Status& status) { return msg::Error::From(0, status).Encode(); }

}  // namespace

struct CoordinationService::Connection {
  ConnectionId id = 0;
  Socket socket;
  std::string peer;
  SendQueue queue{kMaxSendQueueBytes};
  std::thread reader;
  std::thread writer;
  std::atomic<bool> finished{false};
};

StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Start(const std::string& bind_host, int port,
                                                                          const ServiceOptions& options) {
  if (options.num_processes < 1) {
    return InvalidArgument("num_processes must be at least 1, got " + std::to_string(options.num_processes));
  }
  if (!(options.heartbeat_timeout_s > 0) || !(options.initialization_timeout_s > 0)) {
    return InvalidArgument("heartbeat and initialization timeouts must be positive");
  }
  if (options.max_connections < options.num_processes) {
    return InvalidArgument("max_connections (" + std::to_string(options.max_connections) +
                           ") must be at least the number of processes (" + std::to_string(options.num_processes) +
                           ")");
  }
  StatusOr<Socket> listener = Socket::Listen(bind_host, port);
  if (!listener.ok()) return listener.status();
  int bound = listener.value().LocalPort();
  std::unique_ptr<CoordinationService> service(new CoordinationService(listener.take(), bound, options));
  service->accept_thread_ = std::thread([s = service.get()] { s->AcceptLoop(); });
  service->monitor_thread_ = std::thread([s = service.get()] { s->MonitorLoop(); });
  return service;
}

CoordinationService::CoordinationService(Socket listener, int port, const ServiceOptions& options)
    : options_(options), port_(port), listener_(std::move(listener)), state_(options) {}

CoordinationService::~CoordinationService() { Stop(); }

void CoordinationService::Stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  if (monitor_thread_.joinable()) monitor_thread_.join();
  std::map<ConnectionId, std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(connections_);
  }
  // An orderly close, bounded in time: replies already queued (the
  // shutdown barrier's release above all: the host stops its service as
  // soon as its own barrier returns) still go out; then each peer gets end
  // of stream after them and closes its side. Closing while a peer's
  // frames sit unread would reset the connection and could destroy a
  // reply the peer has not read yet.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto wait_until = [&](const std::function<bool()>& done) {
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  for (auto& [id, c] : conns) wait_until([&c = c] { return c->queue.bytes() == 0; });
  for (auto& [id, c] : conns) c->socket.ShutdownWrite();
  // After the shutdown barrier every member closes its side; otherwise
  // (a failed job) nobody is waited for.
  if (all_departed()) {
    for (auto& [id, c] : conns) wait_until([&c = c] { return c->finished.load(); });
  }
  for (auto& [id, c] : conns) {
    c->queue.Abort();
    c->socket.ShutdownBoth();
  }
  for (auto& [id, c] : conns) {
    if (c->reader.joinable()) c->reader.join();
    if (c->writer.joinable()) c->writer.join();
  }
}

std::optional<Status> CoordinationService::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failure();
}

int CoordinationService::failed_process() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failed_process();
}

bool CoordinationService::all_departed() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.all_departed();
}

int CoordinationService::connections() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(connections_.size());
}

void CoordinationService::Reap() {
  if (finished_.load() == 0) return;
  std::vector<std::shared_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      // Once stopping, a connection whose reader ended may still have replies
      // queued, and its writer waits for them until Stop aborts the queue:
      // joining it here, on the thread Stop joins first, would deadlock.
      // Stop closes those. (finished first: a reader that ended because of
      // the stop set it after it saw stopping_, so stopping_ reads true here.)
      if (it->second->finished.load() && !stopping_.load()) {
        --finished_;
        finished.push_back(it->second);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    if (c->reader.joinable()) c->reader.join();
    if (c->writer.joinable()) c->writer.join();
  }
}

void CoordinationService::Refuse(Socket socket, const std::string& peer) {
  ++refused_;
  Status why(Code::kResourceExhausted, "the myplugin coordinator has " + std::to_string(options_.max_connections) +
                                           " connections open (its limit); try again later");
  rejections_.Log("refused a connection from " + peer + ": " + why.message());
  // Never blocks: the accept thread serves everyone.
  socket.TrySend(ErrorFrame(why));
}

void CoordinationService::AcceptLoop() {
  int backoff_ms = 0;
  while (!stopping_) {
    StatusOr<Socket> s = listener_.Accept(100);
    // Reap first: when accept fails for want of descriptors, those of the
    // finished connections are the ones to free.
    Reap();
    if (!s.ok()) {
      // EMFILE and the like persist until descriptors are freed: back off
      // (up to 1 s) rather than spin, and say so at a bounded rate.
      accept_errors_.Log("accept failed: " + s.status().message());
      backoff_ms = std::min(1000, backoff_ms == 0 ? 10 : backoff_ms * 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      continue;
    }
    backoff_ms = 0;
    if (!s.value().valid()) continue;
    auto conn = std::make_shared<Connection>();
    conn->socket = s.take();
    conn->socket.SetSendTimeout(kRejectSendTimeoutS);
    conn->peer = conn->socket.PeerName();
    bool full;
    {
      std::lock_guard<std::mutex> lock(mu_);
      full = static_cast<int>(connections_.size()) >= options_.max_connections;
      if (!full) {
        conn->id = next_id_++;
        connections_[conn->id] = conn;
      }
    }
    if (full) {
      Refuse(std::move(conn->socket), conn->peer);
      continue;
    }
    // Outside the lock: nothing reads conn->reader but Reap and Stop, which
    // run on this thread or after it.
    try {
      conn->reader = std::thread([this, conn] { ServeConnection(conn); });
    } catch (const std::system_error& e) {
      // Out of threads (a pids limit): this connection is dropped, the
      // service goes on with the ones it has.
      accept_errors_.Log("cannot serve a connection from " + conn->peer + ": no thread (" + e.what() + ")");
      conn->socket.ShutdownBoth();
      std::lock_guard<std::mutex> lock(mu_);
      connections_.erase(conn->id);
    }
  }
}

void CoordinationService::ServeConnection(const std::shared_ptr<Connection>& conn) {
  std::string frame;
  Status st = conn->socket.RecvFrame(&frame, kHandshakeTimeoutMs, kMaxHelloBytes);
  if (!st.ok()) {
    rejections_.Log("rejected a connection from " + conn->peer + ": " + st.message());
    conn->socket.SendAll(ErrorFrame(st));
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Outbox out;
      st = state_.OnHello(conn->id, conn->peer, frame, out);
      Deliver(out);
    }
    if (!st.ok()) {
      rejections_.Log("rejected a connection from " + conn->peer + ": " + st.message());
      while (auto f = conn->queue.TryPop()) {
        if (!conn->socket.SendAll(*f).ok()) break;
      }
    }
  }
  if (st.ok()) {
    conn->socket.SetSendTimeout(ServiceState::SendProgressTimeoutSeconds(options_.heartbeat_timeout_s));
    try {
      conn->writer = std::thread([this, conn] { WriteLoop(conn); });
    } catch (const std::system_error& e) {
      st = Status(Code::kUnavailable, std::string("no thread to write to it (") + e.what() + ")");
    }
  }
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
  if (!stopping_) {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    state_.OnDisconnect(conn->id, st, out);
    Deliver(out);
    conn->queue.Abort();
    conn->socket.ShutdownBoth();
  }
  // Stopping: Stop closes the connection once its last replies are out.
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

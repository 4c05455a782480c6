// One file (~455 lines) for the service's sockets and threads: accept,
// handshake, read and write loops, monitor. What a message does is
// service_state.cc's (no sockets there), split by concern.
#include "coordination/service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <system_error>
#include <thread>

// Standalone Asio (Debian's libasio-dev), header-only: the event loop for
// connections that have not proven the token.
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include "common/log.h"
#include "coordination/messages.h"
#include "coordination/send_queue.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

using tcp = asio::ip::tcp;

// A connection must say Hello within this time, or it is dropped.
constexpr std::chrono::milliseconds kHandshakeTimeout{10000};
// What a refused or rejected peer gets to read its error frame: it is not
// a member, and nobody waits for it.
constexpr std::chrono::milliseconds kRejectSendTimeout{1000};
// How often the event loop looks for members whose threads are done.
constexpr std::chrono::milliseconds kReapInterval{100};

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

  // Nothing more is sent (the writer ends) and the reader wakes.
  void Close() {
    queue.Abort();
    socket.ShutdownBoth();
  }
};

struct CoordinationService::Loop {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer backoff{io};  // after an accept error
  asio::steady_timer reap{io};
  int backoff_ms = 0;
};

// A connection until its Hello is accepted: a socket and a timer on the
// event loop, owned by the handlers waiting on them. It holds one of the
// connection slots (open_) until it ends, or hands it to its member.
struct CoordinationService::Handshake {
  Handshake(CoordinationService* s, tcp::socket sock) : service(s), socket(std::move(sock)), timer(socket.get_executor()) {}
  ~Handshake() {
    if (!member) --service->open_;
  }
  CoordinationService* service;
  tcp::socket socket;
  // The Hello deadline, then the deadline of a rejected peer's error frame.
  asio::steady_timer timer;
  ConnectionId id = 0;
  std::string peer;
  unsigned char prefix[4] = {};
  std::string payload;
  std::vector<std::shared_ptr<const std::string>> replies;
  bool timed_out = false;
  bool member = false;
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
  const bool v6 = listener.value().IsIPv6();
  std::unique_ptr<CoordinationService> service(new CoordinationService(bound, options));
  asio::error_code ec;
  Socket fd = listener.take();
  service->loop_->acceptor.assign(v6 ? tcp::v6() : tcp::v4(), fd.fd(), ec);
  if (ec) return Internal("cannot serve the coordinator's listening socket: " + ec.message());
  fd.Release();  // the acceptor owns it now
  service->AcceptNext();
  service->ReapEvery();
  service->loop_thread_ = std::thread([s = service.get()] { s->loop_->io.run(); });
  service->monitor_thread_ = std::thread([s = service.get()] { s->MonitorLoop(); });
  return service;
}

CoordinationService::CoordinationService(int port, const ServiceOptions& options)
    : options_(options), port_(port), loop_(std::make_unique<Loop>()), state_(options) {}

CoordinationService::~CoordinationService() { Stop(); }

void CoordinationService::Stop() {
  if (stopping_.exchange(true)) return;
  // The event loop first: no more connections, and the peers still saying
  // Hello are closed (their handlers, which own them, are destroyed with it).
  loop_->io.stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  loop_.reset();
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
    c->Close();
  }
  for (auto& [id, c] : conns) {
    if (c->reader.joinable()) c->reader.join();
    if (c->writer.joinable()) c->writer.join();
  }
}

Status CoordinationService::Restart(const std::string& token, int num_processes) {
  if (num_processes < 1 || num_processes > options_.max_connections) {
    return InvalidArgument("a restart needs between 1 and " + std::to_string(options_.max_connections) +
                           " processes, got " + std::to_string(num_processes));
  }
  std::vector<std::shared_ptr<Connection>> earlier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return FailedPrecondition("the coordination service has stopped");
    ServiceOptions next = state_.options();
    if (token == next.token) return InvalidArgument("a restart needs a new token");
    next.earlier_tokens.push_back(next.token);
    next.token = token;
    next.num_processes = num_processes;
    next.attempt += 1;
    state_ = ServiceState(next);
    for (auto& [id, c] : connections_) earlier.push_back(c);
  }
  // Their readers then report to the new state, which does not know them.
  for (auto& c : earlier) {
    c->Close();
  }
  return OkStatus();
}

int CoordinationService::attempt() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.options().attempt;
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

bool CoordinationService::recoverable() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.recoverable();
}

void CoordinationService::ExpectRejoin(int pid, bool expected) {
  std::lock_guard<std::mutex> lock(mu_);
  Outbox out;
  state_.ExpectRejoin(pid, expected, out);
  Deliver(out);
}

void CoordinationService::ProcessEnded(int pid, const std::string& how) {
  std::shared_ptr<Connection> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    const ConnectionId conn = state_.OnProcessEnded(pid, how, out);
    Deliver(out);
    auto it = connections_.find(conn);
    if (conn && it != connections_.end()) dropped = it->second;
  }
  // Its reader then sees the end and reports to a state that has let go of it.
  if (dropped) dropped->Close();
}

std::vector<uint64_t> CoordinationService::failures_per_process() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failures_per_process();
}

uint64_t CoordinationService::epoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.epoch();
}

void CoordinationService::Reap() {
  if (finished_.load() == 0) return;
  std::vector<std::shared_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second->finished.load()) {
        --finished_;
        finished.push_back(it->second);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    // Its reader is done, so nobody reads the peer's side any more: what is
    // still queued cannot matter, and the writer must not wait for more
    // (a reader that ends while the service stops leaves the queue open).
    c->Close();
    if (c->reader.joinable()) c->reader.join();
    if (c->writer.joinable()) c->writer.join();
    --open_;
  }
}

void CoordinationService::ReapEvery() {
  loop_->reap.expires_after(kReapInterval);
  loop_->reap.async_wait([this](const asio::error_code& ec) {
    if (ec || stopping_) return;
    Reap();
    ReapEvery();
  });
}

void CoordinationService::AcceptNext() {
  loop_->acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    // Reap first: when accept fails for want of descriptors, those of the
    // finished members are the ones to free.
    Reap();
    if (ec) {
      // EMFILE and the like persist until descriptors are freed: back off
      // (up to 1 s) rather than spin, and say so at a bounded rate.
      accept_errors_.Log("accept failed: accept: " + ec.message());
      int& backoff_ms = loop_->backoff_ms;
      backoff_ms = std::min(1000, backoff_ms == 0 ? 10 : backoff_ms * 2);
      loop_->backoff.expires_after(std::chrono::milliseconds(backoff_ms));
      loop_->backoff.async_wait([this](const asio::error_code& e) {
        if (!e && !stopping_) AcceptNext();
      });
      return;
    }
    loop_->backoff_ms = 0;
    Socket::MarkAccepted(socket.native_handle());
    std::string peer = Socket::PeerNameOf(socket.native_handle());
    if (open_.load() >= options_.max_connections) {
      ++refused_;
      Status why(Code::kResourceExhausted, "the myplugin coordinator has " + std::to_string(options_.max_connections) +
                                               " connections open (its limit); try again later");
      rejections_.Log("refused a connection from " + peer + ": " + why.message());
      // Never blocks: the event loop serves everyone. The socket closes here.
      asio::error_code ignored;
      socket.non_blocking(true, ignored);
      socket.send(asio::buffer(ErrorFrame(why)), 0, ignored);
    } else {
      ++open_;
      auto h = std::make_shared<Handshake>(this, std::move(socket));
      h->id = next_id_++;
      h->peer = std::move(peer);
      StartHandshake(h);
    }
    AcceptNext();
  });
}

namespace {

// What RecvFrame says for the same ends of a read.
Status ReadError(bool timed_out, const asio::error_code& ec) {
  if (timed_out) return Status(Code::kDeadlineExceeded, "timed out waiting for the peer");
  if (ec == asio::error::eof) return Status(Code::kUnavailable, "connection closed by peer");
  return Status(Code::kUnavailable, "recv: " + ec.message());
}

}  // namespace

void CoordinationService::StartHandshake(const std::shared_ptr<Handshake>& h) {
  h->timer.expires_after(kHandshakeTimeout);
  // At the deadline the pending read or write ends with an error.
  h->timer.async_wait([h](const asio::error_code& ec) {
    if (ec) return;
    h->timed_out = true;
    asio::error_code ignored;
    h->socket.cancel(ignored);
  });
  // Only a Hello is read: its length is checked against kMaxHelloBytes
  // before anything is allocated.
  asio::async_read(h->socket, asio::buffer(h->prefix), [this, h](const asio::error_code& ec, size_t) {
    if (ec) return Reject(h, ReadError(h->timed_out, ec), {});
    uint32_t length = 0;
    Status st = DecodeLength(h->prefix, &length, kMaxHelloBytes);
    if (!st.ok()) return Reject(h, st, {});
    h->payload.resize(length);
    asio::async_read(h->socket, asio::buffer(h->payload), [this, h](const asio::error_code& ec2, size_t) {
      if (ec2) return Reject(h, ReadError(h->timed_out, ec2), {});
      OnHelloFrame(h);
    });
  });
}

void CoordinationService::OnHelloFrame(const std::shared_ptr<Handshake>& h) {
  auto conn = std::make_shared<Connection>();
  conn->id = h->id;
  conn->peer = h->peer;
  Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections_[conn->id] = conn;
    Outbox out;
    st = state_.OnHello(conn->id, conn->peer, h->payload, out);
    Deliver(out);
    if (!st.ok()) connections_.erase(conn->id);
  }
  if (!st.ok()) {
    std::vector<std::shared_ptr<const std::string>> frames;
    while (auto f = conn->queue.TryPop()) frames.push_back(std::move(f));
    return Reject(h, st, std::move(frames));
  }
  // A member: its slot passes to the connection (Reap gives it back), and
  // blocking code with a reader and a writer thread serves it from here.
  asio::error_code ec;
  h->timer.cancel();
  h->member = true;
  conn->socket = Socket::FromEventLoop(h->socket.release(ec));
  conn->socket.SetSendTimeout(ServiceState::SendProgressTimeoutSeconds(options_.heartbeat_timeout_s));
  ServeMember(conn);
}

void CoordinationService::Reject(const std::shared_ptr<Handshake>& h, const Status& why,
                                 std::vector<std::shared_ptr<const std::string>> frames) {
  rejections_.Log("rejected a connection from " + h->peer + ": " + why.message());
  if (frames.empty()) frames.push_back(std::make_shared<const std::string>(ErrorFrame(why)));
  h->replies = std::move(frames);
  std::vector<asio::const_buffer> buffers;
  for (const auto& f : h->replies) buffers.push_back(asio::buffer(*f));
  h->timer.expires_after(kRejectSendTimeout);
  h->timer.async_wait([h](const asio::error_code& ec) {
    if (ec) return;
    asio::error_code ignored;
    h->socket.cancel(ignored);
  });
  asio::async_write(h->socket, buffers, [h](const asio::error_code&, size_t) {
    asio::error_code ignored;
    h->timer.cancel();
    h->socket.shutdown(tcp::socket::shutdown_both, ignored);
    h->socket.close(ignored);
  });
}

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

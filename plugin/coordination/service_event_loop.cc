// The service's event loops: accepting connections (within the limit) on the
// first, each handed to a loop in turn, which reads its Hello with a deadline
// and then serves it as a member or rejects it.
#include "coordination/service.h"

#include <algorithm>
#include <chrono>

#include <asio/read.hpp>
#include <asio/write.hpp>

#include "coordination/messages.h"
#include "coordination/service_io.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

// A connection must say Hello within this time, or it is dropped.
constexpr std::chrono::milliseconds kHandshakeTimeout{10000};
// What a refused or rejected peer gets to read its error frame: it is not
// a member, and nobody waits for it.
constexpr std::chrono::milliseconds kRejectSendTimeout{1000};

std::string ErrorFrame(const Status& status) { return msg::Error::From(0, status).Encode(); }

}  // namespace

// A connection until its Hello is accepted: a socket and a timer on its
// loop, owned by the handlers waiting on them. It holds one of the
// connection slots (open_) until it ends, or hands it to its member.
struct CoordinationService::Handshake {
  Handshake(CoordinationService* s, Loop& l, tcp::socket sock)
      : service(s), loop(&l), socket(std::move(sock)), timer(l.io) {}
  ~Handshake() {
    if (!member) --service->open_;
  }
  CoordinationService* service;
  Loop* const loop;  // the socket's
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

void CoordinationService::AcceptNext() {
  // Round robin: each connection's socket belongs to its loop from here on.
  Loop& next = *loops_[next_id_ % loops_.size()];
  listener_->acceptor.async_accept(next.io, [this, &next](const asio::error_code& ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // EMFILE and the like persist until descriptors are freed: back off
      // (up to 1 s) rather than spin, and say so at a bounded rate.
      accept_errors_.Log("accept failed: accept: " + ec.message());
      int& backoff_ms = listener_->backoff_ms;
      backoff_ms = std::min(1000, backoff_ms == 0 ? 10 : backoff_ms * 2);
      listener_->backoff.expires_after(std::chrono::milliseconds(backoff_ms));
      listener_->backoff.async_wait([this](const asio::error_code& e) {
        if (!e && !stopping_) AcceptNext();
      });
      return;
    }
    listener_->backoff_ms = 0;
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
      auto h = std::make_shared<Handshake>(this, next, std::move(socket));
      h->id = next_id_++;
      h->peer = std::move(peer);
      asio::post(next.io, [this, h] { StartHandshake(h); });
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
  auto conn = std::make_shared<Connection>(*h->loop);
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
  // A member: its slot passes to the connection (EndMember gives it back),
  // and the loop serves it from here.
  h->timer.cancel();
  h->member = true;
  conn->socket = std::move(h->socket);
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

}  // namespace myplugin::coordination

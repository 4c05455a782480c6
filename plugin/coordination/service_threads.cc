// Members on their event loops: reading frames and handing them to the
// state (under the state lock, never during I/O), flushing each member's
// send queue as its socket takes bytes, and the ends of a member (its peer
// closed, it stopped reading). A few threads serve every member, so a job
// of thousands costs descriptors and memory, not threads; the monitor
// thread ticks the state's clock.
#include "coordination/service.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "coordination/service_io.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

// What one readiness of one member reads at most before the loop moves on:
// a member sending a 64 MiB value holds up nobody for long.
constexpr size_t kReadBurstBytes = 1u << 20;

// The socket has room for more now (the peer took bytes).
bool Writable(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT);
}

}  // namespace

void CoordinationService::ServeMember(const std::shared_ptr<Connection>& conn) {
  asio::error_code ignored;
  conn->socket.non_blocking(true, ignored);
  ReadMore(conn);
  if (!conn->flushing.exchange(true)) Flush(conn);  // the HelloOk
}

void CoordinationService::ReadMore(const std::shared_ptr<Connection>& conn) {
  // A receive, not a wait for readiness: Asio then reads as the socket
  // becomes readable, without re-arming its epoll registration (an
  // epoll_ctl) or a last read that finds nothing (EAGAIN) per frame:
  // half the system calls of an arrival at a barrier of thousands.
  conn->socket.async_receive(asio::buffer(conn->first), [this, conn](const asio::error_code& ec, size_t n) {
    if (ec == asio::error::operation_aborted) return;
    if (ec == asio::error::eof) return EndMember(conn, Status(Code::kUnavailable, "connection closed by peer"));
    if (ec) return EndMember(conn, Status(Code::kUnavailable, "recv: " + ec.message()));
    OnReadable(conn, n);
  });
}

void CoordinationService::OnReadable(const std::shared_ptr<Connection>& conn, size_t received) {
  std::vector<std::string> frames;
  Status st;
  size_t pos = 0;  // conn->in up to here is taken as frames
  // Whole frames out; a length over the limit ends the member before
  // anything of that size is held.
  auto take_frames = [&] {
    while (conn->in.size() - pos >= 4) {
      uint32_t length = 0;
      st = DecodeLength(reinterpret_cast<const unsigned char*>(conn->in.data() + pos), &length);
      if (!st.ok() || conn->in.size() - pos - 4 < length) break;
      frames.push_back(conn->in.substr(pos + 4, length));
      pos += 4 + length;
    }
  };
  conn->in.append(conn->first.data(), received);
  take_frames();
  // The receive filled its buffer: there may be more (a big value), read
  // here up to a burst's worth before the next connection's turn.
  std::vector<char>& buf = conn->loop->buffer;
  size_t total = received;
  while (st.ok() && received == conn->first.size() && total < kReadBurstBytes) {
    ssize_t n = ::recv(conn->socket.native_handle(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n == 0) st = Status(Code::kUnavailable, "connection closed by peer");
    if (n < 0) st = Status(Code::kUnavailable, std::string("recv: ") + std::strerror(errno));
    if (n <= 0) break;
    total += static_cast<size_t>(n);
    conn->in.append(buf.data(), static_cast<size_t>(n));
    take_frames();
  }
  conn->in.erase(0, pos);
  // Stopping: what a peer still sends is read (see Stop) but not acted on.
  if (!frames.empty() && !stopping_) {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    for (const std::string& frame : frames) {
      Status handled = state_.OnFrame(conn->id, frame, out);
      if (!handled.ok()) {
        st = handled;
        break;
      }
    }
    Deliver(out);
  }
  if (!st.ok()) return EndMember(conn, st);
  ReadMore(conn);
}

void CoordinationService::EndMember(const std::shared_ptr<Connection>& conn, const Status& why) {
  if (conn->finished.load()) return;
  conn->finished = true;
  // Stopping: Stop closes the connection once its last replies are out.
  if (stopping_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    state_.OnDisconnect(conn->id, why, out);
    Deliver(out);
    connections_.erase(conn->id);
  }
  conn->queue.Abort();
  asio::error_code ignored;
  conn->stall.cancel();
  conn->socket.close(ignored);
  --open_;
}

void CoordinationService::Flush(const std::shared_ptr<Connection>& conn) {
  if (conn->finished.load() || !conn->socket.is_open()) {
    conn->flushing = false;
    return;
  }
  const int fd = conn->socket.native_handle();
  if (!conn->blocked) conn->progress = std::chrono::steady_clock::now();
  conn->blocked = false;
  for (;;) {
    if (!conn->sending) {
      conn->sending = conn->queue.TryPop();
      conn->sent = 0;
      if (!conn->sending) {
        conn->flushing = false;
        // A frame queued after TryPop found none, but before `flushing`
        // was cleared, posted no flush of its own: look once more.
        if (conn->queue.bytes() == 0 || conn->flushing.exchange(true)) return;
        continue;
      }
    }
    const std::string& f = *conn->sending;
    ssize_t n = ::send(fd, f.data() + conn->sent, f.size() - conn->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      conn->sent += static_cast<size_t>(n);
      conn->progress = std::chrono::steady_clock::now();
      if (conn->sent == f.size()) {
        conn->queue.Sent(f.size());
        conn->sending.reset();
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      conn->blocked = true;
      conn->socket.async_wait(tcp::socket::wait_write, [this, conn](const asio::error_code& ec) {
        if (ec) {
          conn->flushing = false;
          return;
        }
        Flush(conn);
      });
      WatchStall(conn);
      return;
    }
    // The peer is gone: its read side sees that too, and ends the member.
    conn->flushing = false;
    asio::error_code ignored;
    conn->socket.shutdown(tcp::socket::shutdown_both, ignored);
    return;
  }
}

void CoordinationService::WatchStall(const std::shared_ptr<Connection>& conn) {
  if (conn->stall_armed) return;
  conn->stall_armed = true;
  const double timeout_s = ServiceState::SendProgressTimeoutSeconds(options_.heartbeat_timeout_s);
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s));
  conn->stall.expires_at(conn->progress + timeout);
  conn->stall.async_wait([this, conn, timeout, timeout_s](const asio::error_code& ec) {
    conn->stall_armed = false;
    if (ec || conn->finished.load() || !conn->blocked) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - conn->progress < timeout) return WatchStall(conn);
    // The peer may have made room while this loop was too busy to send it
    // more (a big job's topology going to thousands at once): the socket
    // is the judge, not our last send.
    if (Writable(conn->socket.native_handle())) {
      conn->progress = now;
      return WatchStall(conn);
    }
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%zu bytes queued, no progress for %g s", conn->queue.bytes(), timeout_s);
    StoppedReading(conn, buf);
  });
}

void CoordinationService::StoppedReading(const std::shared_ptr<Connection>& conn, const std::string& detail) {
  if (conn->finished.load()) return;
  if (!stopping_) {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    state_.OnStoppedReading(conn->id, detail, out);
    Deliver(out);
  }
  // Its read side then sees the end, and reports it if nothing did.
  conn->queue.Abort();
  asio::error_code ignored;
  conn->socket.shutdown(tcp::socket::shutdown_both, ignored);
}

void CoordinationService::CloseOnLoop(const std::shared_ptr<Connection>& conn) {
  conn->queue.Abort();
  if (loops_.empty()) return;
  // On its loop, which alone closes its socket: never another's descriptor.
  asio::post(conn->loop->io, [conn] {
    asio::error_code ignored;
    if (conn->socket.is_open()) conn->socket.shutdown(tcp::socket::shutdown_both, ignored);
  });
}

void CoordinationService::Deliver(Outbox& out) {
  if (out.frames.empty()) return;  // most reads (heartbeats) answer nothing
  if (loops_.empty()) {
    out.frames.clear();
    return;
  }
  // The connections each loop is to flush.
  std::vector<std::vector<std::shared_ptr<Connection>>> flush(loops_.size());
  for (Outbox::Frame& f : out.frames) {
    auto it = connections_.find(f.to);
    if (it == connections_.end()) continue;
    const std::shared_ptr<Connection>& conn = it->second;
    if (!conn->queue.Push(std::move(f.bytes))) {
      if (!conn->queue.overflowed() || conn->stop_reported.exchange(true)) continue;
      asio::post(conn->loop->io, [this, conn] {
        StoppedReading(conn, "over " + ByteCount(kMaxSendQueueBytes) + " queued: it reads slower than the job writes to it");
      });
    } else if (!conn->flushing.exchange(true)) {
      flush[conn->loop->index].push_back(conn);
    }
  }
  out.frames.clear();
  for (size_t i = 0; i < flush.size(); ++i) {
    if (flush[i].empty()) continue;
    asio::post(loops_[i]->io, [this, conns = std::move(flush[i])] {
      for (const auto& conn : conns) Flush(conn);
    });
  }
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

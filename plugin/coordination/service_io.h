// What the service's files share: a member's connection (socket, send queue, reader
// and writer threads) and the event loop's parts (Asio's context, the acceptor, timers).
#pragma once

#include <atomic>
#include <string>
#include <thread>

// Standalone Asio (Debian's libasio-dev), header-only: the event loop for
// connections that have not proven the token.
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "coordination/limits.h"
#include "coordination/send_queue.h"
#include "coordination/service.h"
#include "coordination/socket.h"

namespace myplugin::coordination {

using tcp = asio::ip::tcp;

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

}  // namespace myplugin::coordination

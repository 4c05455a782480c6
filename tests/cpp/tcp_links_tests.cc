// tcp_links.h: the kernel's state of real loopback connections, found by
// socket diagnostics among this process's sockets only; a peer that stops
// reading shows as a closed receive window; the clause each state gives.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "common/tcp_links.h"

namespace {

using myplugin::DescribeTcpLink;
using myplugin::TcpConnectionState;

// A connected loopback pair: {client, server's end}; -1s if it failed.
std::pair<int, int> LoopbackPair() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(listener);
    return {-1, -1};
  }
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(client);
    close(listener);
    return {-1, -1};
  }
  int server = accept(listener, nullptr, nullptr);
  close(listener);
  return {client, server};
}

void TestFindsThisProcesssConnections() {
  auto [client, server] = LoopbackPair();
  CHECK(client >= 0 && server >= 0);
  if (client < 0) return;
  auto one = myplugin::TcpStateOfSocket(client);
  CHECK(one.has_value() && one->unacked_segments == 0 && one->retransmits_in_a_row == 0);
  auto all = myplugin::TcpConnectionsTo("127.0.0.1");
  CHECK(all.ok());
  // Both ends are this process's and have 127.0.0.1 as their far end.
  if (all.ok()) CHECK(all.value().size() >= 2);
  CHECK(DescribeTcpLink("process 1", "127.0.0.1", all.value()).find("nothing this process sent to 127.0.0.1 (process 1) is unacknowledged") == 0);
  // A host name resolves; an address nobody here is connected to gives none.
  auto by_name = myplugin::TcpConnectionsTo("localhost");
  CHECK(by_name.ok() && by_name.value().size() >= 2);
  auto none = myplugin::TcpConnectionsTo("127.0.0.77");
  CHECK(none.ok() && none.value().empty());
  CHECK(DescribeTcpLink("process 1", "127.0.0.77", none.value()).empty());
  CHECK(!myplugin::TcpConnectionsTo("no-such-host.invalid").ok());
  int pipe_fds[2];
  CHECK(pipe(pipe_fds) == 0);
  CHECK(!myplugin::TcpStateOfSocket(pipe_fds[0]).has_value());
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  close(client);
  close(server);
}

void TestAPeerThatReadsNothingShowsAClosedWindow() {
  auto [client, server] = LoopbackPair();
  if (client < 0) return;
  // Small buffers fill fast; the server never reads.
  int small = 4096;
  setsockopt(server, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  setsockopt(client, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK);
  std::vector<char> chunk(1 << 16, 'x');
  // The server's kernel acknowledges until its buffer is full, then
  // advertises a window of 0.
  std::optional<TcpConnectionState> st;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    while (send(client, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
    }
    st = myplugin::TcpStateOfSocket(client);
    if (st && st->peer_window_known && st->peer_window_bytes == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(st.has_value() && st->peer_window_known && st->peer_window_bytes == 0);
  if (st) {
    const std::string said = DescribeTcpLink("process 2", "127.0.0.1", {*st});
    CHECK(said.find("127.0.0.1 (process 2) acknowledges what this process sends but takes no more") == 0);
  }
  close(client);
  close(server);
}

void TestTheClauseForALosingLink() {
  TcpConnectionState clean, losing;
  clean.peer_window_known = losing.peer_window_known = true;
  clean.peer_window_bytes = losing.peer_window_bytes = 65536;
  clean.ms_since_last_ack = 900;
  clean.ms_since_last_data_received = 400;
  clean.total_retransmits = 2;
  losing.unacked_segments = 12;
  losing.retransmits_in_a_row = 5;
  losing.ms_since_last_ack = 6300;
  losing.total_retransmits = 40;
  CHECK(DescribeTcpLink("process 3", "10.0.0.3", {clean, losing}) ==
        "the link to 10.0.0.3 (process 3) loses what this process sends: 12 segments unacknowledged, sent again 5 "
        "times in a row, the last acknowledgement 6.3 s ago (2 TCP connections there, 42 segments sent again in all)");
  CHECK(DescribeTcpLink("process 3", "10.0.0.3", {clean}) ==
        "nothing this process sent to 10.0.0.3 (process 3) is unacknowledged; the last acknowledgement came 0.9 s "
        "ago, the last data 0.4 s ago (1 TCP connection there, 2 segments sent again in all)");
  // Unacknowledged data not yet timed out is no loss.
  TcpConnectionState in_flight = clean;
  in_flight.unacked_segments = 3;
  CHECK(DescribeTcpLink("process 3", "10.0.0.3", {in_flight}).find("nothing this process sent") == 0);
  // A kernel too old to report the window says nothing of it.
  TcpConnectionState old_kernel;
  CHECK(DescribeTcpLink("process 3", "10.0.0.3", {old_kernel}).find("nothing this process sent") == 0);
}

}  // namespace

void RunTcpLinksTests() {
  TestFindsThisProcesssConnections();
  TestAPeerThatReadsNothingShowsAClosedWindow();
  TestTheClauseForALosingLink();
}

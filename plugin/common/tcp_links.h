// What the kernel knows of this process's TCP connections to a peer: for
// the errors that must tell a stopped peer from a poor or broken link. A
// collective that stalls says "stopped, stuck, or their link is down"; the
// connections' own state (segments unacknowledged and sent again, a closed
// receive window, the last acknowledgement) says which of those it was.
//
// Read on the error path only: a socket's state with getsockopt(TCP_INFO),
// or every connection of this process to an address with the kernel's
// socket diagnostics (NETLINK_SOCK_DIAG, what `ss -ti` reads), for
// connections a library holds (Gloo's pairs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin {

// One connection, from its tcp_info.
struct TcpConnectionState {
  uint32_t unacked_segments = 0;
  // Timeouts in a row for the oldest unacknowledged segment (tcpi_retransmits):
  // the link delivers nothing of ours while it grows.
  uint32_t retransmits_in_a_row = 0;
  // The receive window the peer last advertised (tcpi_snd_wnd, kernels
  // 5.4 and later): 0 while its host acknowledges but its process reads
  // nothing.
  bool peer_window_known = false;
  uint32_t peer_window_bytes = 0;
  uint32_t total_retransmits = 0;  // over the connection's life
  uint32_t ms_since_last_ack = 0;
  uint32_t ms_since_last_data_received = 0;
};

// The state of the connected TCP socket `fd`; nullopt if it is not one.
std::optional<TcpConnectionState> TcpStateOfSocket(int fd);

// Every connection whose far end is `address` (a numeric IPv4 or IPv6
// address, or a host name, resolved here) and that carries or tries to
// carry data (not listening, half-open or in TIME_WAIT): this process's
// own sockets, not other processes' on this host, and those closed while
// their data still goes out, which the kernel keeps without an owner.
StatusOr<std::vector<TcpConnectionState>> TcpConnectionsTo(const std::string& address);

// One clause for an error message about `who` ("process 3") at `address`:
// what the connections of `sender` (this process; "the coordinator" in a
// reason the service sends to all) there say of the link (they are to the
// host: other processes there may hold some). Empty when there are none.
std::string DescribeTcpLink(const std::string& who, const std::string& address,
                            const std::vector<TcpConnectionState>& connections,
                            const std::string& sender = "this process");

// The same clause for the one connected socket `fd` to `who`.
std::string DescribeTcpSocket(const std::string& who, int fd, const std::string& sender = "this process");

}  // namespace myplugin

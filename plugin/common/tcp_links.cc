#include "common/tcp_links.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

namespace myplugin {
namespace {

// The states of a connection that still carries, or tries to carry, data,
// by the kernel's numbers (include/net/tcp_states.h; the UAPI headers do
// not name them): established, SYN sent, FIN wait 1 and 2, close wait,
// last ACK, closing. Not listening, half-open (SYN received), TIME_WAIT or
// closed: those have no tcp_info, or nothing to say of the link.
constexpr uint32_t kCarryingStates = (1u << 1) | (1u << 2) | (1u << 4) | (1u << 5) | (1u << 8) | (1u << 9) | (1u << 11);

// `length`: the bytes of `info` the kernel filled (older kernels fill less).
TcpConnectionState FromInfo(const struct tcp_info& info, size_t length) {
  TcpConnectionState s;
  s.unacked_segments = info.tcpi_unacked;
  s.retransmits_in_a_row = info.tcpi_retransmits;
  s.total_retransmits = info.tcpi_total_retrans;
  s.ms_since_last_ack = info.tcpi_last_ack_recv;
  s.ms_since_last_data_received = info.tcpi_last_data_recv;
  if (length >= offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof(info.tcpi_snd_wnd)) {
    s.peer_window_known = true;
    s.peer_window_bytes = info.tcpi_snd_wnd;
  }
  return s;
}

// The inodes of this process's sockets: socket diagnostics list every
// socket of the network namespace, other processes' too.
std::set<uint64_t> OwnSocketInodes() {
  std::set<uint64_t> inodes;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return inodes;
  while (dirent* e = readdir(dir)) {
    char path[300], target[64];
    std::snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long long inode = 0;
    if (std::sscanf(target, "socket:[%llu]", &inode) == 1) inodes.insert(inode);
  }
  closedir(dir);
  return inodes;
}

// The peer's addresses as socket diagnostics give them: 16 bytes, IPv4 in
// the first 4 (an AF_INET socket) and as ::ffff:a.b.c.d (a dual-stack one).
struct Far {
  int family;
  unsigned char bytes[16];
};

std::vector<Far> Resolve(const std::string& address) {
  std::string host = address;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::vector<Far> out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Far f{};
    if (a->ai_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      f.family = AF_INET;
      std::memcpy(f.bytes, &sin->sin_addr, 4);
      out.push_back(f);
      Far mapped{};  // the same peer through an IPv6 socket
      mapped.family = AF_INET6;
      mapped.bytes[10] = mapped.bytes[11] = 0xff;
      std::memcpy(mapped.bytes + 12, &sin->sin_addr, 4);
      out.push_back(mapped);
    } else if (a->ai_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      f.family = AF_INET6;
      std::memcpy(f.bytes, &sin6->sin6_addr, 16);
      out.push_back(f);
    }
  }
  freeaddrinfo(res);
  return out;
}

bool Matches(const inet_diag_msg& m, const std::vector<Far>& far) {
  for (const Far& f : far) {
    if (f.family == m.idiag_family && std::memcmp(m.id.idiag_dst, f.bytes, f.family == AF_INET ? 4 : 16) == 0) {
      return true;
    }
  }
  return false;
}

// One dump of a family's TCP sockets; the matching ones of ours into `out`.
Status Dump(int family, const std::vector<Far>& far, const std::set<uint64_t>& own,
            std::vector<TcpConnectionState>* out) {
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return Status(Code::kUnavailable, std::string("socket diagnostics: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } req{};
  req.header.nlmsg_len = sizeof(req);
  req.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.request.sdiag_family = static_cast<uint8_t>(family);
  req.request.sdiag_protocol = IPPROTO_TCP;
  req.request.idiag_ext = 1u << (INET_DIAG_INFO - 1);
  req.request.idiag_states = kCarryingStates;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return Status(Code::kUnavailable, std::string("socket diagnostics: ") + std::strerror(errno));
  }
  std::vector<char> buf(64 << 10);
  // A reply that never ends cannot happen (the kernel ends every dump with
  // NLMSG_DONE), but a bound costs nothing.
  for (int reads = 0; reads < 100000; ++reads) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(Code::kUnavailable, std::string("socket diagnostics: ") + std::strerror(errno));
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) return OkStatus();
      if (h->nlmsg_type == NLMSG_ERROR) return Status(Code::kUnavailable, "socket diagnostics refused the dump");
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      // Inode 0: closed by its process while its data still goes out (a
      // library that gives up on a connection closes it at once): the
      // kernel no longer says whose, and it tells the most about the link.
      if (!Matches(*m, far) || (m->idiag_inode != 0 && own.count(m->idiag_inode) == 0)) continue;
      struct tcp_info info{};
      size_t length = 0;
      int left = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<inet_diag_msg*>(m) + 1); RTA_OK(a, left);
           a = RTA_NEXT(a, left)) {
        if (a->rta_type == INET_DIAG_INFO) {
          // Older kernels give a shorter struct: the rest stays zero.
          length = std::min<size_t>(RTA_PAYLOAD(a), sizeof(info));
          std::memcpy(&info, RTA_DATA(a), length);
        }
      }
      if (length == 0) continue;  // no tcp_info: nothing to say
      out->push_back(FromInfo(info, length));
    }
  }
  return Status(Code::kUnavailable, "socket diagnostics: the dump did not end");
}

std::string Seconds(uint32_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", ms / 1000.0);
  return buf;
}

}  // namespace

std::optional<TcpConnectionState> TcpStateOfSocket(int fd) {
  struct tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  return FromInfo(info, len);
}

StatusOr<std::vector<TcpConnectionState>> TcpConnectionsTo(const std::string& address) {
  const std::vector<Far> far = Resolve(address);
  if (far.empty()) return Status(Code::kInvalidArgument, "cannot resolve " + address);
  const std::set<uint64_t> own = OwnSocketInodes();
  std::vector<TcpConnectionState> out;
  for (int family : {AF_INET, AF_INET6}) {
    Status st = Dump(family, far, own, &out);
    if (!st.ok()) return st;
  }
  return out;
}

std::string DescribeTcpLink(const std::string& who, const std::string& address,
                            const std::vector<TcpConnectionState>& connections, const std::string& sender) {
  if (connections.empty()) return "";
  // The connection that says most: one losing data, else one whose peer
  // stopped reading; else facts only (nothing of ours waits for an
  // acknowledgement, which says nothing of what the peer sent).
  const TcpConnectionState* losing = nullptr;
  const TcpConnectionState* closed_window = nullptr;
  uint32_t last_ack = UINT32_MAX, last_data = UINT32_MAX;
  uint64_t resent = 0;
  for (const TcpConnectionState& c : connections) {
    resent += c.total_retransmits;
    if (c.unacked_segments > 0 && c.retransmits_in_a_row > 0 &&
        (losing == nullptr || c.retransmits_in_a_row > losing->retransmits_in_a_row)) {
      losing = &c;
    }
    if (c.peer_window_known && c.peer_window_bytes == 0 && closed_window == nullptr) closed_window = &c;
    last_ack = std::min(last_ack, c.ms_since_last_ack);
    last_data = std::min(last_data, c.ms_since_last_data_received);
  }
  const std::string there = address + " (" + who + ")";
  const std::string over = std::to_string(connections.size()) + " TCP connection" +
                           (connections.size() == 1 ? "" : "s") + " there, " + std::to_string(resent) +
                           " segments sent again in all";
  if (losing != nullptr) {
    return "the link to " + there + " loses what " + sender + " sends: " + std::to_string(losing->unacked_segments) +
           (losing->unacked_segments == 1 ? " segment" : " segments") + " unacknowledged, sent again " + std::to_string(losing->retransmits_in_a_row) +
           " times in a row, the last acknowledgement " + Seconds(losing->ms_since_last_ack) + " ago (" + over + ")";
  }
  if (closed_window != nullptr) {
    return there + " acknowledges what " + sender + " sends but takes no more: a receive window there is closed, "
                   "its process reads nothing (" + over + ")";
  }
  return "nothing " + sender + " sent to " + there + " is unacknowledged; the last acknowledgement came " +
         Seconds(last_ack) + " ago, the last data " + Seconds(last_data) + " ago (" + over + ")";
}

std::string DescribeTcpSocket(const std::string& who, int fd, const std::string& sender) {
  std::optional<TcpConnectionState> state = TcpStateOfSocket(fd);
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  char host[INET6_ADDRSTRLEN] = "";
  if (!state || getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  std::string address = host;
  // An IPv4 peer of a dual-stack socket, as users know it.
  if (address.rfind("::ffff:", 0) == 0 && address.find('.') != std::string::npos) address = address.substr(7);
  return DescribeTcpLink(who, address, {*state}, sender);
}

}  // namespace myplugin

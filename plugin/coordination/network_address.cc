#include "coordination/network_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

namespace myplugin::coordination {
namespace {

std::string Numeric(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

int FamilyOf(const std::string& address) {
  in6_addr v6;
  in_addr v4;
  std::string bare = address.substr(0, address.find('%'));
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) return AF_INET6;
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) return AF_INET;
  return AF_UNSPEC;
}

}  // namespace

StatusOr<std::string> InterfaceAddress(const std::string& interface, const std::string& like) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Internal(std::string("getifaddrs: ") + std::strerror(errno));
  const int preferred = FamilyOf(like);
  std::string first, same_family;
  std::set<std::string> names;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_name != nullptr) names.insert(ifa->ifa_name);
    if (ifa->ifa_addr == nullptr || interface != ifa->ifa_name) continue;
    const int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::string address = Numeric(ifa->ifa_addr, len);
    if (address.empty()) continue;
    // A link-local IPv6 address needs its scope; a global one is simpler to use.
    bool link_local = family == AF_INET6 &&
                      IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr);
    if (first.empty() && !link_local) first = address;
    if (same_family.empty() && family == preferred && !link_local) same_family = address;
  }
  freeifaddrs(list);
  if (!same_family.empty()) return same_family;
  if (!first.empty()) return first;
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  bool exists = names.count(interface) > 0;
  return Status(Code::kNotFound, "network interface '" + interface + "' " +
                                     (exists ? "has no IPv4 or global IPv6 address" : "does not exist") +
                                     " (interfaces here: " + known + ")");
}

StatusOr<std::string> SourceAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0) return Status(Code::kUnavailable, "cannot resolve '" + host + "': " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // connect() on a datagram socket only picks the route and source address.
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      std::string address;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        address = Numeric(reinterpret_cast<sockaddr*>(&local), len);
      }
      close(fd);
      if (!address.empty()) {
        freeaddrinfo(res);
        return address;
      }
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  return Status(Code::kUnavailable, "no route to '" + host + "': " + why);
}

bool IsLoopbackAddress(const std::string& address) {
  std::string bare = address.substr(0, address.find('%'));
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return address == "localhost";
}

const char* AddressFamilyName(const std::string& address) {
  switch (FamilyOf(address)) {
    case AF_INET:
      return "IPv4";
    case AF_INET6:
      return "IPv6";
    default:
      return nullptr;
  }
}

}  // namespace myplugin::coordination

// The address a process advertises to its peers (for the collectives'
// direct connections). Host names are a poor default on clusters:
// containers and cloud VMs share or misreport them, and a host name may
// resolve to loopback on its own host. Addresses come from the kernel's
// view of the network instead.
#pragma once

#include <string>

#include "common/status.h"

namespace myplugin::coordination {

// The first address of the named interface (like NCCL_SOCKET_IFNAME),
// preferring the family of `like` (an address of ours, e.g. the one our
// connection to the coordinator uses), so a job on IPv6 stays on IPv6.
// NOT_FOUND names the interfaces that exist.
StatusOr<std::string> InterfaceAddress(const std::string& interface, const std::string& like);

// The local address that packets to `host` leave from (a route lookup; no
// packet is sent). UNAVAILABLE when there is no route.
StatusOr<std::string> SourceAddressToward(const std::string& host);

bool IsLoopbackAddress(const std::string& address);

// "IPv4" or "IPv6" for a numeric address, nullptr for a host name.
const char* AddressFamilyName(const std::string& address);

}  // namespace myplugin::coordination

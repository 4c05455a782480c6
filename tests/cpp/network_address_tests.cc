// Address classification and interface lookup (coordination/network_address.h),
// checked against this machine's loopback interface.
#include <cstring>
#include <string>

#include "check.h"
#include "coordination/network_address.h"

namespace {

void TestNetworkAddress() {
  namespace c = myplugin::coordination;
  CHECK(c::IsLoopbackAddress("127.0.1.1") && c::IsLoopbackAddress("::1") && c::IsLoopbackAddress("::ffff:127.0.0.1"));
  CHECK(!c::IsLoopbackAddress("10.0.0.1") && !c::IsLoopbackAddress("fd00::1") && !c::IsLoopbackAddress("node-1"));
  CHECK(std::strcmp(c::AddressFamilyName("10.0.0.1"), "IPv4") == 0);
  CHECK(std::strcmp(c::AddressFamilyName("fe80::1%eth0"), "IPv6") == 0);
  CHECK(c::AddressFamilyName("node-1") == nullptr);
  auto lo = c::InterfaceAddress("lo", "127.0.0.1");
  CHECK(lo.ok() && lo.value() == "127.0.0.1");
  auto none = c::InterfaceAddress("nosuch0", "");
  CHECK(!none.ok() && none.status().message().find("does not exist") != std::string::npos);
  auto toward = c::SourceAddressToward("127.0.0.1");
  CHECK(toward.ok() && c::IsLoopbackAddress(toward.value()));
}

}  // namespace

void RunNetworkAddressTests() { TestNetworkAddress(); }

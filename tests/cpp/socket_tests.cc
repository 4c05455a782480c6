// ParseHostPort (coordination/socket.h): IPv4 and bracketed IPv6 addresses,
// and refusals of a missing or bad port.
#include <string>

#include "check.h"
#include "coordination/socket.h"

namespace {

namespace wire = myplugin::coordination;

void TestHostPort() {
  auto a = wire::ParseHostPort("10.0.0.1:1234");
  CHECK(a.ok() && a.value().host == "10.0.0.1" && a.value().port == 1234);
  auto b = wire::ParseHostPort("[::1]:80");
  CHECK(b.ok() && b.value().host == "::1" && b.value().port == 80);
  CHECK(!wire::ParseHostPort("nohost").ok());
  CHECK(!wire::ParseHostPort("h:99999").ok());
  CHECK(!wire::ParseHostPort("h:12ab").ok());
}

}  // namespace

void RunSocketTests() { TestHostPort(); }

// What a process tells the service about itself (coordination/process_info.h)
// survives encoding, and garbage is refused.
#include <string>

#include "check.h"
#include "coordination/process_info.h"

namespace {

namespace wire = myplugin::coordination;

void TestProcessInfo() {
  wire::ProcessInfo info;
  info.hostname = "node-7";
  info.num_devices = 4;
  info.device_kind = "cpu";
  info.pid = 4321;
  info.address = "fd00::7";
  info.host_id = "boot/node-7/net:1";
  auto back = wire::DecodeProcessInfo(wire::EncodeProcessInfo(info));
  CHECK(back.ok());
  CHECK(back.value().hostname == "node-7" && back.value().num_devices == 4 && back.value().pid == 4321);
  CHECK(back.value().address == "fd00::7" && back.value().host_id == "boot/node-7/net:1");
  CHECK(!wire::DecodeProcessInfo("garbage").ok());
}

}  // namespace

void RunProcessInfoTests() { TestProcessInfo(); }

// Clients of a coordination service on this machine, for the unit tests.
#pragma once

#include <string>

#include "coordination/client.h"

namespace unit {

// Process `id` of `n`, of the service on `port`. Fate sharing is off: a
// failure must fail the test, not exit the test binary.
inline myplugin::coordination::ClientOptions LocalClientOptions(
    int port, const std::string& token, int id, int n,
    double initialization_timeout_s = myplugin::coordination::ClientOptions{}.initialization_timeout_s) {
  myplugin::coordination::ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.token = token;
  o.process_id = id;
  o.num_processes = n;
  o.initialization_timeout_s = initialization_timeout_s;
  o.fate_sharing = false;
  return o;
}

}  // namespace unit

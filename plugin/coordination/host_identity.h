// What makes processes able to share memory: the same running kernel (its
// boot id, which a reboot or another machine changes) and the same network
// namespace (the shared-memory transport hands its segment over an abstract
// Unix socket, which lives there). Published with each process's topology,
// so that processes know, not guess, which peers share their host.
#pragma once

#include <string>

namespace myplugin::coordination {

// "<boot id>/<hostname>/net:<namespace inode>"; empty where the system does
// not say (then no process counts as sharing a host with another).
std::string HostIdentity();

}  // namespace myplugin::coordination

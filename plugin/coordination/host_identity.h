// What makes processes able to share memory: the same running kernel (its
// boot id, which a reboot or another machine changes) and the same network
// namespace (the shared-memory transport hands its segment over an abstract
// Unix socket, which lives there). Published with each process's topology,
// so that processes know, not guess, which peers share their host.
#pragma once

#include <cstdint>
#include <string>

namespace myplugin::coordination {

// Every process receives every other's identity, so it is short: 16 hex
// digits of a 64-bit FNV-1a hash of "<boot id>/<hostname>/net:<namespace
// inode>" (only equality matters; two hosts of a 100,000-host job collide
// with odds under 1e-9). Empty where the system does not say (then no
// process counts as sharing a host with another).
std::string HostIdentity();
std::string HostIdentityOf(const std::string& boot_id, const std::string& hostname, uint64_t net_namespace_inode);

}  // namespace myplugin::coordination

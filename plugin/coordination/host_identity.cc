#include "coordination/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace myplugin::coordination {

std::string HostIdentityOf(const std::string& boot_id, const std::string& hostname, uint64_t net_namespace_inode) {
  const std::string described = boot_id + "/" + hostname + "/net:" + std::to_string(net_namespace_inode);
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a's 64-bit offset basis and prime
  for (unsigned char c : described) h = (h ^ c) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string HostIdentity() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  if (!std::getline(in, boot_id) || boot_id.empty()) return "";
  struct stat ns {};
  if (::stat("/proc/self/ns/net", &ns) != 0) return "";
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "";
  return HostIdentityOf(boot_id, host, static_cast<uint64_t>(ns.st_ino));
}

}  // namespace myplugin::coordination

#include "collectives/communicator_cache.h"

#include <algorithm>
#include <map>
#include <string>
#include <set>

#include "collectives/gloo_communicator.h"
#include "collectives/hierarchical_communicator.h"
#include "collectives/process_runtime.h"
#include "collectives/shm_communicator.h"
#include "common/deadline.h"
#include "coordination/network_address.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {

WaitLimits CommunicatorCache::Limits(const Settings& settings) {
  WaitLimits limits;
  limits.arrival_s = settings.collective_timeout_s;
  limits.stall_s = settings.collective_stall_s;
  limits.cap_s = settings.collective_cap_s;
  return limits;
}

void CommunicatorCache::Drop() {
  std::lock_guard<std::mutex> lock(mu_);
  communicators_.Clear();
}

StatusOr<std::shared_ptr<Communicator>> CommunicatorCache::ForProcessGroup(std::vector<int> process_group,
                                                                     const std::vector<int>& devices) {
  coordination::DistributedRuntime& runtime = ProcessRuntime::Get().distributed();
  std::shared_ptr<coordination::CoordinationClient> client = runtime.client();
  if (!client) {
    return FailedPrecondition("collectives across processes need the distributed runtime: call "
                              "jax_plugin.distributed.initialize() (or run under myplugin-run) first");
  }
  const int n = runtime.num_processes();
  if (process_group.empty()) {
    for (int p = 0; p < n; ++p) process_group.push_back(p);
  }
  std::set<int> seen;
  for (int p : process_group) {
    if (p < 0 || p >= n || !seen.insert(p).second) {
      return InvalidArgument("bad process group " + IdList(process_group) + " for a job of " + std::to_string(n) +
                             " processes: ids must be distinct and in range");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A new job (initialize after shutdown) or a new membership (an
    // agreement after a failure): the old communicators are dead.
    const uint64_t epoch = runtime.epoch();
    if (client_seen_ != client.get() || epoch_seen_ != epoch) {
      communicators_.Clear();
      client_seen_ = client.get();
      epoch_seen_ = epoch;
    }
  }
  std::shared_ptr<const Settings> settings = ProcessRuntime::Get().settings();
  return communicators_.Get({process_group, devices},
                            [&] { return Make(process_group, devices, client, *settings); });
}

StatusOr<std::shared_ptr<Communicator>> CommunicatorCache::Make(
    const std::vector<int>& process_group, const std::vector<int>& devices,
    const std::shared_ptr<coordination::CoordinationClient>& client, const Settings& settings) {
  coordination::DistributedRuntime& runtime = ProcessRuntime::Get().distributed();
  std::vector<coordination::ProcessInfo> processes = runtime.processes();
  const WaitLimits limits = Limits(settings);
  // One host is what every process published, not a guess from addresses.
  std::vector<std::string> host_of;
  std::map<std::string, int> per_host;
  bool known = true;
  for (int p : process_group) {
    host_of.push_back(processes[p].host_id);
    known = known && !processes[p].host_id.empty();
    ++per_host[processes[p].host_id];
  }
  const bool one_host = known && per_host.size() == 1;
  if (settings.transport == "shm" && !one_host) {
    return FailedPrecondition("MYPLUGIN_TRANSPORT=shm, but processes " + IdList(process_group) +
                              " do not share one host (or network namespace): use auto, hierarchical or gloo");
  }
  if (settings.transport == "hierarchical" && !known) {
    return FailedPrecondition("MYPLUGIN_TRANSPORT=hierarchical, but some of processes " + IdList(process_group) +
                              " published no host identity: use auto or gloo");
  }
  // Shared memory pays only where a host has several of the group's processes.
  bool every_host_shares = known && per_host.size() > 1;
  for (const auto& [host, count] : per_host) every_host_shares = every_host_shares && count > 1;
  std::string kind = settings.transport;
  if (kind == "auto") kind = one_host ? "shm" : every_host_shares && kHierarchicalAcrossHosts ? "hierarchical" : "gloo";
  // The epoch keeps a new membership's rendezvous apart from the old one's.
  std::string prefix = std::to_string(runtime.epoch()) + "/";
  for (int p : process_group) prefix += std::to_string(p) + ",";
  prefix += "/";
  for (int d : devices) prefix += std::to_string(d) + ",";
  prefix += "/";
  std::shared_ptr<Communicator> comm;
  if (kind == "shm") {
    StatusOr<std::unique_ptr<ShmCommunicator>> made =
        ShmCommunicator::Create(process_group, runtime.process_id(), limits, client, "myplugin/shm/" + prefix);
    if (!made.ok()) return made.status();
    comm.reset(made.take().release());
  } else if (kind == "hierarchical") {
    auto gloo = [client, limits](const std::vector<int>& processes,
                                 const std::string& key_prefix) -> StatusOr<std::unique_ptr<Communicator>> {
      StatusOr<std::unique_ptr<GlooCommunicator>> made = MakeGloo(processes, client, key_prefix, limits);
      if (!made.ok()) return made.status();
      return std::unique_ptr<Communicator>(made.take().release());
    };
    StatusOr<std::unique_ptr<HierarchicalCommunicator>> made = HierarchicalCommunicator::Create(
        process_group, host_of, runtime.process_id(), limits, client, "myplugin/hier/" + prefix, gloo);
    if (!made.ok()) return made.status();
    comm.reset(made.take().release());
  } else {
    StatusOr<std::unique_ptr<GlooCommunicator>> made = MakeGloo(process_group, client, "myplugin/gloo/" + prefix, limits);
    if (!made.ok()) return made.status();
    comm.reset(made.take().release());
  }
  if (!devices.empty()) comm->SetDeviceGroup(devices);
  // A failure reported by the coordination service ends calls in flight.
  std::weak_ptr<Communicator> weak = comm;
  client->AddFailureCallback([weak](const Status& why) {
    if (auto c = weak.lock()) c->Abort(why);
  });
  const double grace = settings.peer_exit_grace_s;
  client->AddPeerShutdownCallback([weak, grace](int process) {
    if (auto c = weak.lock()) c->PeerFinished(process, grace);
  });
  for (int process : client->finished_peers()) comm->PeerFinished(process, grace);
  return comm;
}

StatusOr<std::string> ListenHostFor(const std::vector<int>& process_group) {
  coordination::DistributedRuntime& runtime = ProcessRuntime::Get().distributed();
  // Each process listens at the address it advertised when it registered
  // (coordination/runtime.h says how that is chosen). A loopback address is
  // useless to a peer on another host (a host name that resolves to
  // 127.0.1.1 on its own host, say): then listen where the route to that
  // peer leaves from.
  std::vector<coordination::ProcessInfo> processes = runtime.processes();
  std::string host = processes[runtime.process_id()].address;
  if (coordination::IsLoopbackAddress(host)) {
    for (int p : process_group) {
      if (coordination::IsLoopbackAddress(processes[p].address)) continue;
      StatusOr<std::string> toward = coordination::SourceAddressToward(processes[p].address);
      if (!toward.ok()) {
        return Status(toward.status().code(), "process " + std::to_string(runtime.process_id()) +
                                                  " advertised loopback address " + host + ", but process " +
                                                  std::to_string(p) + " is elsewhere (" + processes[p].address +
                                                  "): " + toward.status().message());
      }
      host = toward.take();
      break;
    }
  }
  // Gloo connects a pair only within one address family: say so now, not
  // as its "address family mismatch" from deep inside the rendezvous.
  if (const char* mine = coordination::AddressFamilyName(host)) {
    for (int p : process_group) {
      const std::string& theirs = processes[p].address;
      const char* family = coordination::AddressFamilyName(theirs);
      if (p == runtime.process_id() || family == nullptr || coordination::IsLoopbackAddress(theirs) ||
          std::string(family) == mine) {
        continue;
      }
      return InvalidArgument("process " + std::to_string(runtime.process_id()) + " listens for collectives at " +
                             mine + " address " + host + ", process " + std::to_string(p) + " at " + family +
                             " address " + theirs + ": the processes of a job must use one address family (the "
                             "advertised address or interface setting differs between them)");
    }
  }
  return host;
}

StatusOr<std::unique_ptr<GlooCommunicator>> CommunicatorCache::MakeGloo(
    const std::vector<int>& process_group, const std::shared_ptr<coordination::CoordinationClient>& client,
    const std::string& prefix, const WaitLimits& limits) {
  StatusOr<std::string> host = ListenHostFor(process_group);
  if (!host.ok()) return host.status();
  return GlooCommunicator::Create(process_group, ProcessRuntime::Get().distributed().process_id(), limits,
                                  host.value(), client, prefix);
}

}  // namespace myplugin::collectives

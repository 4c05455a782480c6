#include "collectives/communicator_cache.h"

#include <cstdlib>
#include <set>

#include "collectives/gloo_communicator.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {

CommunicatorCache& CommunicatorCache::Get() {
  static CommunicatorCache* cache = new CommunicatorCache;
  return *cache;
}

namespace {

// A positive number of seconds from the environment, else `fallback`.
double SecondsFromEnv(const char* name, double fallback) {
  const char* env = std::getenv(name);
  if (env != nullptr && *env != '\0') {
    double v = std::atof(env);
    if (v > 0) return v;
  }
  return fallback;
}

}  // namespace

double CommunicatorCache::TimeoutSeconds() { return SecondsFromEnv("MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", 300); }

double CommunicatorCache::PeerExitGraceSeconds() { return SecondsFromEnv("MYPLUGIN_PEER_EXIT_GRACE_SECONDS", 5); }

StatusOr<std::shared_ptr<Communicator>> CommunicatorCache::ForClique(std::vector<int> clique,
                                                                     const std::vector<int>& devices) {
  coordination::DistributedRuntime& runtime = coordination::DistributedRuntime::Get();
  std::shared_ptr<coordination::CoordinationClient> client = runtime.client();
  if (!client) {
    return FailedPrecondition("collectives across processes need the distributed runtime: call "
                              "jax_plugin.distributed.initialize() (or run under myplugin-run) first");
  }
  const int n = runtime.num_processes();
  if (clique.empty()) {
    for (int p = 0; p < n; ++p) clique.push_back(p);
  }
  std::set<int> seen;
  for (int p : clique) {
    if (p < 0 || p >= n || !seen.insert(p).second) {
      return InvalidArgument("bad clique " + ProcessList(clique) + " for a job of " + std::to_string(n) +
                             " processes: ids must be distinct and in range");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (client_seen_ != client.get()) {  // a new job (initialize after shutdown): old communicators are dead
      communicators_.Clear();
      client_seen_ = client.get();
    }
  }
  return communicators_.Get({clique, devices}, [&] { return Make(clique, devices, client); });
}

StatusOr<std::shared_ptr<Communicator>> CommunicatorCache::Make(
    const std::vector<int>& clique, const std::vector<int>& devices,
    const std::shared_ptr<coordination::CoordinationClient>& client) {
  coordination::DistributedRuntime& runtime = coordination::DistributedRuntime::Get();
  // Peers on one host talk over loopback; across hosts, by host name.
  std::vector<coordination::ProcessInfo> processes = runtime.processes();
  bool one_host = true;
  for (int p : clique) one_host = one_host && processes[p].hostname == processes[clique[0]].hostname;
  const char* override_host = std::getenv("MYPLUGIN_GLOO_HOSTNAME");
  std::string host = override_host != nullptr && *override_host ? override_host
                     : one_host                                   ? "127.0.0.1"
                                                                  : processes[runtime.process_id()].hostname;
  std::string prefix = "myplugin/gloo/";
  for (int p : clique) prefix += std::to_string(p) + ",";
  prefix += "/";
  for (int d : devices) prefix += std::to_string(d) + ",";
  prefix += "/";
  StatusOr<std::unique_ptr<GlooCommunicator>> made =
      GlooCommunicator::Create(clique, runtime.process_id(), TimeoutSeconds(), host, client, prefix);
  if (!made.ok()) return made.status();
  std::shared_ptr<Communicator> comm(made.take().release());
  if (!devices.empty()) comm->SetDeviceClique(devices);
  // A failure reported by the coordination service ends calls in flight.
  std::weak_ptr<Communicator> weak = comm;
  client->AddFailureCallback([weak](const Status& why) {
    if (auto c = weak.lock()) c->Abort(why);
  });
  const double grace = PeerExitGraceSeconds();
  client->AddPeerShutdownCallback([weak, grace](int process) {
    if (auto c = weak.lock()) c->PeerFinished(process, grace);
  });
  for (int process : client->finished_peers()) comm->PeerFinished(process, grace);
  return comm;
}

}  // namespace myplugin::collectives

// The baseline of bench/collectives.py: Gloo's own ring all-reduce, with
// nothing of ours around it (rendezvous through a file store).
//
// usage: raw_gloo_allreduce RANK SIZE STORE_DIR REPS BYTES...
// prints: RESULT <bytes> <seconds per call, best of REPS> <median>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s RANK SIZE STORE_DIR REPS BYTES...\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), size = std::atoi(argv[2]), reps = std::atoi(argv[4]);
  gloo::rendezvous::FileStore store(argv[3]);
  gloo::transport::tcp::attr attr;
  // RAW_GLOO_HOSTNAME: this process's address, for ranks on several hosts.
  const char* host = std::getenv("RAW_GLOO_HOSTNAME");
  attr.hostname = host != nullptr && *host != '\0' ? host : "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);
  for (int a = 5; a < argc; ++a) {
    const size_t bytes = std::strtoull(argv[a], nullptr, 10);
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    std::vector<double> times;
    for (int i = 0; i < reps + 1; ++i) {
      gloo::AllreduceOptions opts(context);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(static_cast<uint32_t>(a * 1000 + i));
      auto t0 = std::chrono::steady_clock::now();
      gloo::allreduce(opts);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) times.push_back(s);  // the first call warms up
    }
    std::sort(times.begin(), times.end());
    std::printf("RESULT %zu %.9f %.9f\n", bytes, times.front(), times[times.size() / 2]);
    std::fflush(stdout);
  }
  return 0;
}

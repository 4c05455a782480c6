// What a client is asked to be: the create options that jax hands to
// PJRT_Client_Create (jax_plugin's, which register_plugin passes: the
// devices of this process in its job; jax_pjrt_client_create_options; and
// jax.distributed's node_id/num_nodes) merged with MYPLUGIN_NUM_DEVICES,
// which the user sets for the process, and the settings (common/settings.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/settings.h"
#include "common/status.h"
#include "pjrt_c_api.h"

namespace myplugin {

struct ClientOptions {
  int num_devices = 1;
  // True when num_devices came from an option or MYPLUGIN_NUM_DEVICES.
  bool num_devices_given = false;
  // From jax.distributed, when it ran. -1 when absent.
  int node_id = -1;
  int num_nodes = -1;
  // The engine devices this process runs on (local_device_ids: CUDA
  // ordinals, as CUDA_VISIBLE_DEVICES counts them); empty: all.
  std::vector<int64_t> visible_devices;
  // Parsed from the same environment, so that a bad value fails the
  // client's creation rather than a program deep in a job.
  Settings settings;
};

// An explicit create option wins over MYPLUGIN_NUM_DEVICES. Unknown option
// names, wrong types and out-of-range values are INVALID_ARGUMENT errors
// that name the option and the accepted ones; a malformed setting is one
// that names the variable.
StatusOr<ClientOptions> ParseClientOptions(const PJRT_NamedValue* values, size_t count,
                                           const EnvLookup& getenv);

// The largest local device count we accept; far beyond any real host.
constexpr int kMaxLocalDevices = 4096;

}  // namespace myplugin

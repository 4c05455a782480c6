// The collectives on numpy buffers: jax_plugin.collectives hands over raw
// bytes, one buffer per local device of the device group, and does the numpy side.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator_cache.h"
#include "collectives/device_collectives.h"
#include "collectives/dtype.h"
#include "collectives/process_runtime.h"
#include "coordination/runtime.h"
#include "python/bindings.h"
#include "python/status_exception.h"
#include "python/without_gil.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

namespace coll = myplugin::collectives;
namespace coord = myplugin::coordination;
using Bytes1D = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// Inputs may be read-only (numpy views of jax arrays are).
using ConstBytes1D = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The devices of the job: how many each process has, and which process this is.
struct DeviceLayout {
  int devices_per_process;
  int process;
  int num_processes;
};

DeviceLayout Layout(size_t local_buffers) {
  auto& rt = coll::ProcessRuntime::Get().distributed();
  if (!rt.initialized()) return {static_cast<int>(local_buffers), 0, 1};
  auto procs = rt.processes();
  return {procs[rt.process_id()].num_devices, rt.process_id(), rt.num_processes()};
}

Status Run(coll::DeviceCollectives& c, const std::string& op, const coll::DeviceBuffers& buffers, size_t count,
           coll::DataType dtype, coll::Reduction reduction, const std::vector<std::pair<int, int>>& pairs) {
  if (op == "all_reduce") return c.AllReduce(buffers, count, dtype, reduction);
  if (op == "all_gather") return c.AllGather(buffers, count, dtype);
  if (op == "reduce_scatter") return c.ReduceScatter(buffers, count, dtype, reduction);
  if (op == "all_to_all") return c.AllToAll(buffers, count, dtype);
  if (op == "collective_permute") return c.CollectivePermute(buffers, count, dtype, pairs);
  return InvalidArgument("unknown collective '" + op + "'");
}

void RunCollective(const std::string& op, const std::string& reduction_name, const std::string& dtype_name,
                   std::vector<ConstBytes1D> sends, std::vector<Bytes1D> recvs, std::vector<int> device_group,
                   std::vector<std::pair<int, int>> pairs) {
  coll::DataType dtype = ValueOrThrow(coll::ParseDataType(dtype_name));
  coll::Reduction reduction =
      reduction_name.empty() ? coll::Reduction::kNone : ValueOrThrow(coll::ParseReduction(reduction_name));
  const size_t item = coll::ByteSize(dtype);
  if (sends.empty() || sends.size() != recvs.size()) throw std::invalid_argument("one send and recv buffer per device");
  if (sends[0].shape(0) % item != 0) throw std::invalid_argument("send buffer is not a whole number of elements");
  const size_t count = sends[0].shape(0) / item;
  DeviceLayout layout = Layout(sends.size());
  if (device_group.empty()) {
    for (int d = 0; d < layout.devices_per_process * layout.num_processes; ++d) device_group.push_back(d);
  }
  coll::DeviceBuffers buffers;
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].shape(0) != sends[0].shape(0)) throw std::invalid_argument("every device must send the same size");
    buffers.send.push_back(sends[i].data());
    buffers.recv.push_back(recvs[i].data());
  }
  ThrowIfError(WithoutGil([&] {
    coll::DeviceCollectives c(device_group, layout.process, layout.devices_per_process);
    return Run(c, op, buffers, count, dtype, reduction, pairs);
  }));
}

}  // namespace

void BindCollectives(nb::module_& m) {
  m.def("collective", &RunCollective, nb::arg("op"), nb::arg("reduction"), nb::arg("dtype"), nb::arg("send"),
        nb::arg("recv"), nb::arg("device_group"), nb::arg("pairs"));
  m.def("collective_barrier", [](std::vector<int> processes) {
    ThrowIfError(WithoutGil([&] {
      auto comm = coll::ProcessRuntime::Get().communicators().ForProcessGroup(std::move(processes));
      return comm.ok() ? comm.value()->Barrier() : comm.status();
    }));
  }, nb::arg("processes"));
  m.def("local_device_count", [] { return Layout(1).devices_per_process; });
}

}  // namespace myplugin::python

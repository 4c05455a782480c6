// DLPack export of a myplugin array (jax_plugin/dlpack.py): the tensor
// that jaxlib would build for jax's own CPU and GPU backends, which refuse
// any other platform (jaxlib's dlpack.cc picks the DLPack device type from
// the client's platform id). It aliases the engine's buffer: no copy.
//
// The engine buffer comes from a BufferCapture (engine/buffer_capture.h)
// around the array's unsafe_buffer_pointer(). The tensor holds the buffer
// (engine/buffer_holds.h): a delete() of the array, a call that donates it
// and its PJRT_Buffer_Destroy all leave the memory to the export, whose
// release makes the deferred delete and destroy. It keeps the Python array
// too, as jaxlib's export does. No external reference of the engine's is
// taken: its list of them is not safe for several threads (buffer_holds.h).
// Everything else goes through our PJRT_Api, as jaxlib's calls do.
#include <Python.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/process_runtime.h"
#include "engine/buffer_capture.h"
#include "engine/buffer_holds.h"
#include "pjrt_c_api.h"
#include "python/bindings.h"
#include "python/dlpack.h"
#include "python/pjrt_capsule.h"

namespace nb = nanobind;

namespace myplugin::python {
namespace {

template <typename Args>
Args Init() {
  Args args{};
  args.struct_size = sizeof(Args);
  return args;
}

// Calls an entry point of our PJRT_Api; BufferError naming it on failure.
template <typename Args>
void Call(const PJRT_Api* api, PJRT_Error* (*fn)(Args*), Args* args, const char* name) {
  if (fn == nullptr) throw nb::buffer_error((std::string("DLPack export: ") + name + " is missing").c_str());
  if (PJRT_Error* error = fn(args)) {
    throw nb::buffer_error((std::string("DLPack export: ") + name + ": " + TakeError(api, error)).c_str());
  }
}

// The DLPack type of an element type, as jaxlib maps it (xla/python's
// dlpack_types.cc); none for types DLPack cannot describe.
std::optional<dlpack::DataType> DlpackType(PJRT_Buffer_Type type) {
  using namespace dlpack;
  switch (type) {
    case PJRT_Buffer_Type_PRED: return DataType{kBool, 8, 1};
    case PJRT_Buffer_Type_S8: return DataType{kInt, 8, 1};
    case PJRT_Buffer_Type_S16: return DataType{kInt, 16, 1};
    case PJRT_Buffer_Type_S32: return DataType{kInt, 32, 1};
    case PJRT_Buffer_Type_S64: return DataType{kInt, 64, 1};
    case PJRT_Buffer_Type_U8: return DataType{kUInt, 8, 1};
    case PJRT_Buffer_Type_U16: return DataType{kUInt, 16, 1};
    case PJRT_Buffer_Type_U32: return DataType{kUInt, 32, 1};
    case PJRT_Buffer_Type_U64: return DataType{kUInt, 64, 1};
    case PJRT_Buffer_Type_F16: return DataType{kFloat, 16, 1};
    case PJRT_Buffer_Type_F32: return DataType{kFloat, 32, 1};
    case PJRT_Buffer_Type_F64: return DataType{kFloat, 64, 1};
    case PJRT_Buffer_Type_BF16: return DataType{kBfloat, 16, 1};
    case PJRT_Buffer_Type_C64: return DataType{kComplex, 64, 1};
    case PJRT_Buffer_Type_C128: return DataType{kComplex, 128, 1};
    case PJRT_Buffer_Type_F8E3M4: return DataType{kFloat8_e3m4, 8, 1};
    case PJRT_Buffer_Type_F8E4M3: return DataType{kFloat8_e4m3, 8, 1};
    case PJRT_Buffer_Type_F8E4M3B11FNUZ: return DataType{kFloat8_e4m3b11fnuz, 8, 1};
    case PJRT_Buffer_Type_F8E4M3FN: return DataType{kFloat8_e4m3fn, 8, 1};
    case PJRT_Buffer_Type_F8E4M3FNUZ: return DataType{kFloat8_e4m3fnuz, 8, 1};
    case PJRT_Buffer_Type_F8E5M2: return DataType{kFloat8_e5m2, 8, 1};
    case PJRT_Buffer_Type_F8E5M2FNUZ: return DataType{kFloat8_e5m2fnuz, 8, 1};
    case PJRT_Buffer_Type_F8E8M0FNU: return DataType{kFloat8_e8m0fnu, 8, 1};
    case PJRT_Buffer_Type_F4E2M1FN: return DataType{kFloat4_e2m1fn, 4, 1};
    default: return std::nullopt;
  }
}

// The tensor and what keeps its memory alive.
struct Export {
  dlpack::ManagedTensor tensor{};
  const PJRT_Api* api = nullptr;
  PJRT_Buffer* buffer = nullptr;
  bool holds_buffer = false;  // BufferHolds::Hold
  PyObject* array = nullptr;  // a strong reference
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  ~Export() {
    // The delete and destroy that jax asked for meanwhile, through our
    // PJRT_Api (engine/buffer_holds.h).
    if (holds_buffer) collectives::ProcessRuntime::Get().buffer_holds().ReleaseThrough(api, buffer);
    if (array == nullptr) return;
    // A consumer may free the tensor on any thread, with or without the
    // GIL; at interpreter exit the reference is left to the exit.
#if PY_VERSION_HEX >= 0x030D0000
    bool finalizing = Py_IsFinalizing();
#else
    bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(array);
    PyGILState_Release(gil);
  }
};

void DeleteExport(dlpack::ManagedTensor* tensor) {
  if (tensor != nullptr) delete static_cast<Export*>(tensor->manager_ctx);
}

// Element strides from the buffer's layout (row-major when the engine has
// none to tell).
std::vector<int64_t> StridesOf(const PJRT_Api* api, PJRT_Buffer* buffer, const std::vector<int64_t>& shape,
                               int64_t element_bytes) {
  size_t rank = shape.size();
  std::vector<int64_t> strides(rank, 0);
  std::vector<int64_t> minor_to_major;
  auto layout = Init<PJRT_Buffer_GetMemoryLayout_Args>();
  layout.buffer = buffer;
  layout.layout.struct_size = sizeof(PJRT_Buffer_MemoryLayout);
  PJRT_Error* error = api->PJRT_Buffer_GetMemoryLayout ? api->PJRT_Buffer_GetMemoryLayout(&layout) : nullptr;
  if (error != nullptr || api->PJRT_Buffer_GetMemoryLayout == nullptr) {
    if (error != nullptr) TakeError(api, error);
    for (size_t i = rank; i-- > 0;) minor_to_major.push_back(static_cast<int64_t>(i));
  } else if (layout.layout.type == PJRT_Buffer_MemoryLayout_Type_Strides) {
    const auto& s = layout.layout.strides;
    if (s.num_byte_strides != rank) throw nb::buffer_error("DLPack export: the buffer's strides do not match its rank");
    for (size_t i = 0; i < rank; ++i) {
      if (element_bytes <= 0 || s.byte_strides[i] % element_bytes != 0) {
        throw nb::buffer_error("DLPack export: the buffer's byte strides are not whole elements");
      }
      strides[i] = s.byte_strides[i] / element_bytes;
    }
    return strides;
  } else {
    const auto& t = layout.layout.tiled;
    if (t.num_tiles != 0) {
      throw nb::buffer_error("DLPack export: the buffer has a tiled layout, which DLPack cannot describe");
    }
    if (t.minor_to_major_size != rank) throw nb::buffer_error("DLPack export: the buffer's layout does not match its rank");
    minor_to_major.assign(t.minor_to_major, t.minor_to_major + rank);
  }
  int64_t stride = 1;
  for (int64_t d : minor_to_major) {
    if (d < 0 || static_cast<size_t>(d) >= rank) throw nb::buffer_error("DLPack export: bad layout dimension");
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

void AwaitReady(const PJRT_Api* api, PJRT_Buffer* buffer) {
  auto ready = Init<PJRT_Buffer_ReadyEvent_Args>();
  ready.buffer = buffer;
  Call(api, api->PJRT_Buffer_ReadyEvent, &ready, "PJRT_Buffer_ReadyEvent");
  auto await_args = Init<PJRT_Event_Await_Args>();
  await_args.event = ready.event;
  PJRT_Error* error;
  {
    nb::gil_scoped_release release;
    error = api->PJRT_Event_Await(&await_args);
  }
  auto destroy = Init<PJRT_Event_Destroy_Args>();
  destroy.event = ready.event;
  api->PJRT_Event_Destroy(&destroy);
  if (error != nullptr) throw nb::buffer_error(("DLPack export: the array failed: " + TakeError(api, error)).c_str());
}

void CapsuleDestructor(PyObject* capsule) noexcept {
  // Only a tensor no consumer took is ours to free; a consumer renames the
  // capsule and calls the deleter itself.
  if (!PyCapsule_IsValid(capsule, dlpack::kCapsuleName)) return;
  auto* tensor = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::kCapsuleName));
  if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
}

// `array`: a single-device jax Array on a myplugin device. The buffer is
// ready before the tensor is handed out, so a consumer's stream (GPU
// memory) may use it at once.
nb::object BufferToDlpack(nb::handle c_api, nb::handle array, int32_t device_type, int32_t device_id) {
  const PJRT_Api* api = ApiFromCapsule(c_api);
  auto out = std::make_unique<Export>();
  out->api = api;
  {
    BufferCapture capture;
    array.attr("unsafe_buffer_pointer")();
    out->buffer = capture.buffer();
  }
  if (out->buffer == nullptr) {
    throw nb::buffer_error("DLPack export: the array's buffer did not come through myplugin's PJRT library");
  }
  PJRT_Buffer* buffer = out->buffer;

  auto type = Init<PJRT_Buffer_ElementType_Args>();
  type.buffer = buffer;
  Call(api, api->PJRT_Buffer_ElementType, &type, "PJRT_Buffer_ElementType");
  std::optional<dlpack::DataType> dtype = DlpackType(type.type);
  if (!dtype) {
    nb::object dtype_object = array.attr("dtype");
    auto name = nb::steal<nb::str>(PyObject_Str(dtype_object.ptr()));
    if (!name.is_valid()) throw nb::python_error();
    throw nb::buffer_error(
        (std::string("DLPack export: element type ") + name.c_str() + " has no DLPack equivalent").c_str());
  }
  auto dims = Init<PJRT_Buffer_Dimensions_Args>();
  dims.buffer = buffer;
  Call(api, api->PJRT_Buffer_Dimensions, &dims, "PJRT_Buffer_Dimensions");
  out->shape.assign(dims.dims, dims.dims + dims.num_dims);
  int64_t element_bytes = dtype->bits / 8;
  out->strides = StridesOf(api, buffer, out->shape, element_bytes);

  if (!collectives::ProcessRuntime::Get().buffer_holds().Hold(buffer)) throw nb::buffer_error("DLPack export: the array has been deleted");
  out->holds_buffer = true;
  AwaitReady(api, buffer);
  auto data = Init<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args>();
  data.buffer = buffer;
  Call(api, api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer, &data, "PJRT_Buffer_OpaqueDeviceMemoryDataPointer");

  out->array = array.ptr();
  Py_INCREF(out->array);
  dlpack::Tensor& t = out->tensor.dl_tensor;
  t.data = data.device_memory_ptr;
  t.device = dlpack::Device{device_type, device_id};
  t.ndim = static_cast<int32_t>(out->shape.size());
  t.dtype = *dtype;
  t.shape = out->shape.data();
  t.strides = out->strides.data();
  t.byte_offset = 0;
  out->tensor.manager_ctx = out.get();
  out->tensor.deleter = DeleteExport;

  PyObject* capsule = PyCapsule_New(&out->tensor, dlpack::kCapsuleName, CapsuleDestructor);
  if (capsule == nullptr) throw nb::python_error();
  out.release();
  return nb::steal(capsule);
}

}  // namespace

void BindDlpackExport(nb::module_& m) {
  m.def("buffer_to_dlpack", &BufferToDlpack, nb::arg("c_api"), nb::arg("array"), nb::arg("device_type"),
        nb::arg("device_id"),
        "A 'dltensor' capsule aliasing a single-device myplugin array's buffer (DLPack export).");
}

}  // namespace myplugin::python

// DLPack's C structures, as its specification (dmlc/dlpack, "C API",
// version 0.8: the unversioned DLManagedTensor that jaxlib and numpy
// exchange in a capsule named "dltensor") lays them out. Declared here from
// the specification: no DLPack header is a build requirement of ours.
#pragma once

#include <cstdint>

namespace myplugin::python::dlpack {

// DLDeviceType (a C enum: an int).
enum DeviceType : int32_t {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,
};

// DLDataTypeCode.
enum TypeCode : uint8_t {
  kInt = 0,
  kUInt = 1,
  kFloat = 2,
  kBfloat = 4,
  kComplex = 5,
  kBool = 6,
  kFloat8_e3m4 = 7,
  kFloat8_e4m3 = 8,
  kFloat8_e4m3b11fnuz = 9,
  kFloat8_e4m3fn = 10,
  kFloat8_e4m3fnuz = 11,
  kFloat8_e5m2 = 12,
  kFloat8_e5m2fnuz = 13,
  kFloat8_e8m0fnu = 14,
  kFloat4_e2m1fn = 17,
};

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr: compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

// The capsule names of the Python protocol: a fresh tensor, and one a
// consumer has taken (it then calls the deleter itself).
inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

}  // namespace myplugin::python::dlpack

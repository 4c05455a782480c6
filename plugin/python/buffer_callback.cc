#include "python/buffer_callback.h"

#include <cstdint>
#include <string>

#include "collectives/ffi_common.h"
#include "python/python_call.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace myplugin::python {
namespace {

PyObject* dispatcher = nullptr;  // only touched with the GIL held

// numpy's name (ml_dtypes' for the narrow floats) of an element type; null
// for one Python cannot view as an array (sub-byte types, tokens).
const char* NumpyName(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::PRED: return "bool";
    case ffi::DataType::S8: return "int8";
    case ffi::DataType::S16: return "int16";
    case ffi::DataType::S32: return "int32";
    case ffi::DataType::S64: return "int64";
    case ffi::DataType::U8: return "uint8";
    case ffi::DataType::U16: return "uint16";
    case ffi::DataType::U32: return "uint32";
    case ffi::DataType::U64: return "uint64";
    case ffi::DataType::F16: return "float16";
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::F64: return "float64";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::C64: return "complex64";
    case ffi::DataType::C128: return "complex128";
    case ffi::DataType::F8E5M2: return "float8_e5m2";
    case ffi::DataType::F8E4M3: return "float8_e4m3";
    case ffi::DataType::F8E4M3FN: return "float8_e4m3fn";
    case ffi::DataType::F8E4M3B11FNUZ: return "float8_e4m3b11fnuz";
    case ffi::DataType::F8E5M2FNUZ: return "float8_e5m2fnuz";
    case ffi::DataType::F8E4M3FNUZ: return "float8_e4m3fnuz";
    case ffi::DataType::F8E3M4: return "float8_e3m4";
    default: return nullptr;
  }
}

// (address, dtype, dims) of one buffer; null with a Python error set, or
// with `why` set for a type that has no array view.
PyObject* Describe(const ffi::AnyBuffer& b, std::string* why) {
  const char* dtype = NumpyName(b.element_type());
  if (dtype == nullptr) {
    *why = "element type " + std::to_string(static_cast<int>(b.element_type())) +
           ", which has no array view in Python";
    return nullptr;
  }
  auto shape = b.dimensions();
  PyRef dims(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
  if (dims.get() == nullptr) return nullptr;
  for (size_t d = 0; d < shape.size(); ++d) {
    PyObject* n = PyLong_FromLongLong(static_cast<long long>(shape[d]));
    if (n == nullptr) return nullptr;
    PyTuple_SET_ITEM(dims.get(), static_cast<Py_ssize_t>(d), n);
  }
  return Py_BuildValue("(KsO)", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(b.untyped_data())),
                       dtype, dims.get());
}

Status RunBufferCallback(uint64_t callback_id, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  if (!Py_IsInitialized()) return FailedPrecondition("a buffer callback ran after the interpreter shut down");
  GilHold gil;
  if (dispatcher == nullptr) {
    return FailedPrecondition("no buffer-callback dispatcher is installed (jax_plugin was not initialized)");
  }
  PyRef ins(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  PyRef outs(PyTuple_New(static_cast<Py_ssize_t>(rets.size())));
  if (ins.get() == nullptr || outs.get() == nullptr) return TakePythonError();
  std::string why;
  for (size_t i = 0; i < args.size(); ++i) {
    auto arg = args.get<ffi::AnyBuffer>(i);
    if (arg.has_error()) return InvalidArgument("operand " + std::to_string(i) + " of the buffer callback is not a buffer");
    PyObject* d = Describe(*arg, &why);
    if (d == nullptr) {
      if (!why.empty()) return InvalidArgument("operand " + std::to_string(i) + " of the buffer callback has " + why);
      return TakePythonError();
    }
    PyTuple_SET_ITEM(ins.get(), static_cast<Py_ssize_t>(i), d);
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto ret = rets.get<ffi::AnyBuffer>(i);
    if (ret.has_error()) return InvalidArgument("result " + std::to_string(i) + " of the buffer callback is not a buffer");
    PyObject* d = Describe(**ret, &why);
    if (d == nullptr) {
      if (!why.empty()) return InvalidArgument("result " + std::to_string(i) + " of the buffer callback has " + why);
      return TakePythonError();
    }
    PyTuple_SET_ITEM(outs.get(), static_cast<Py_ssize_t>(i), d);
  }
  PyRef result(PyObject_CallFunction(dispatcher, "KOO", static_cast<unsigned long long>(callback_id), ins.get(),
                                     outs.get()));
  if (result.get() == nullptr) return TakePythonError();
  return Status();
}

ffi::Error BufferCallbackImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, uint64_t callback_id) {
  return collectives::ToFfi(RunBufferCallback(callback_id, args, rets));
}

}  // namespace

void SetBufferCallbackDispatcher(PyObject* fn) { ReplaceReference(dispatcher, fn); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginBufferCallback, BufferCallbackImpl,
                              ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attr<uint64_t>("callback_id"));

void* BufferCallbackHandler() { return reinterpret_cast<void*>(MypluginBufferCallback); }

}  // namespace myplugin::python

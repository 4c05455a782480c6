#include "python/host_callback.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/ffi_common.h"
#include "python/python_call.h"

namespace ffi = xla::ffi;

namespace myplugin::python {
namespace {

// Only touched with the GIL held.
PyObject* dispatcher = nullptr;

// Lets other Python threads run while a copy completes.
Status WaitWithoutGil(BufferAccess& access) {
  PyThreadState* saved = PyEval_SaveThread();
  Status st = access.Wait();
  PyEval_RestoreThread(saved);
  return st;
}

// A Python object's bytes, held for as long as this lives.
class PyBytesView {
 public:
  explicit PyBytesView(PyObject* o) { ok_ = PyObject_GetBuffer(o, &view_, PyBUF_C_CONTIGUOUS) == 0; }
  ~PyBytesView() {
    if (ok_) PyBuffer_Release(&view_);
  }
  PyBytesView(const PyBytesView&) = delete;
  PyBytesView& operator=(const PyBytesView&) = delete;
  bool ok() const { return ok_; }
  const void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool ok_ = false;
};

}  // namespace

Status RunHostCallback(uint64_t callback_id, ffi::RemainingArgs args, ffi::RemainingRets rets,
                       BufferAccess& access) {
  if (!Py_IsInitialized()) return FailedPrecondition("a Python callback ran after the interpreter shut down");
  GilHold gil;
  if (dispatcher == nullptr) {
    return FailedPrecondition("no Python callback dispatcher is installed (jax_plugin was not initialized)");
  }
  PyRef py_args(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (py_args.get() == nullptr) return TakePythonError();
  // Each operand's dimensions as the engine has them: a partitioned=True
  // callback gets its shard, whose shape the lowering did not know.
  PyRef py_dims(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (py_dims.get() == nullptr) return TakePythonError();
  for (size_t i = 0; i < args.size(); ++i) {
    auto arg = args.get<ffi::AnyBuffer>(i);
    if (arg.has_error()) return InvalidArgument("operand " + std::to_string(i) + " of the callback is not a buffer");
    PyObject* item;
    if (arg->element_type() == ffi::DataType::TOKEN) {
      item = Py_NewRef(Py_None);
      PyTuple_SET_ITEM(py_dims.get(), static_cast<Py_ssize_t>(i), Py_NewRef(Py_None));
    } else {
      auto shape = arg->dimensions();
      PyObject* dims = PyTuple_New(static_cast<Py_ssize_t>(shape.size()));
      if (dims == nullptr) return TakePythonError();
      PyTuple_SET_ITEM(py_dims.get(), static_cast<Py_ssize_t>(i), dims);  // owned by py_dims from here
      for (size_t d = 0; d < shape.size(); ++d) {
        PyObject* n = PyLong_FromLongLong(static_cast<long long>(shape[d]));
        if (n == nullptr) return TakePythonError();
        PyTuple_SET_ITEM(dims, static_cast<Py_ssize_t>(d), n);
      }
      const size_t bytes = arg->size_bytes();
      item = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(bytes));
      if (item == nullptr) return TakePythonError();
      if (bytes > 0) {
        Status st = access.ToHost(PyByteArray_AS_STRING(item), arg->untyped_data(), bytes);
        if (!st.ok()) {
          Py_DECREF(item);
          return st;
        }
      }
    }
    PyTuple_SET_ITEM(py_args.get(), static_cast<Py_ssize_t>(i), item);
  }
  if (Status st = WaitWithoutGil(access); !st.ok()) return st;

  PyRef result(PyObject_CallFunction(dispatcher, "KOO", static_cast<unsigned long long>(callback_id), py_args.get(),
                                     py_dims.get()));
  if (result.get() == nullptr) return TakePythonError();
  PyRef outputs(PySequence_Fast(result.get(), "the callback dispatcher must return a sequence"));
  if (outputs.get() == nullptr) return TakePythonError();

  std::vector<std::unique_ptr<PyBytesView>> keep;  // until the copies finish
  Py_ssize_t next = 0;
  const Py_ssize_t returned = PySequence_Fast_GET_SIZE(outputs.get());
  for (size_t i = 0; i < rets.size(); ++i) {
    auto ret = rets.get<ffi::AnyBuffer>(i);
    if (ret.has_error()) return InvalidArgument("result " + std::to_string(i) + " of the callback is not a buffer");
    if ((*ret)->element_type() == ffi::DataType::TOKEN) continue;
    if (next >= returned) {
      return InvalidArgument("the callback returned " + std::to_string(returned) + " arrays, the program expects more");
    }
    auto view = std::make_unique<PyBytesView>(PySequence_Fast_GET_ITEM(outputs.get(), next));
    if (!view->ok()) return TakePythonError();
    const size_t bytes = (*ret)->size_bytes();
    if (view->size() != bytes) {
      return InvalidArgument("callback result " + std::to_string(next) + " has " + std::to_string(view->size()) +
                             " bytes; the program expects " + std::to_string(bytes));
    }
    if (bytes > 0) {
      if (Status st = access.ToBuffer((*ret)->untyped_data(), view->data(), bytes); !st.ok()) return st;
    }
    keep.push_back(std::move(view));
    ++next;
  }
  if (next != returned) {
    return InvalidArgument("the callback returned " + std::to_string(returned) + " arrays; the program expects " +
                           std::to_string(next));
  }
  return WaitWithoutGil(access);
}

namespace {

class HostMemory final : public BufferAccess {
 public:
  Status ToHost(void* host, const void* buffer, size_t bytes) override {
    std::memcpy(host, buffer, bytes);
    return Status();
  }
  Status ToBuffer(void* buffer, const void* host, size_t bytes) override {
    std::memcpy(buffer, host, bytes);
    return Status();
  }
  Status Wait() override { return Status(); }
};

ffi::Error HostCallbackImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, uint64_t callback_id) {
  HostMemory access;
  return collectives::ToFfi(RunHostCallback(callback_id, args, rets, access));
}

}  // namespace

void SetHostCallbackDispatcher(PyObject* fn) { ReplaceReference(dispatcher, fn); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginHostCallback, HostCallbackImpl,
                              ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attr<uint64_t>("callback_id"));

void* HostCallbackHandler() { return reinterpret_cast<void*>(MypluginHostCallback); }

}  // namespace myplugin::python

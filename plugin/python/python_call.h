// Calling Python from an engine thread (the host and buffer callbacks'
// handlers): the GIL, references, and a pending exception as our error.
#pragma once

#include <Python.h>

#include <string>

#include "common/status.h"

namespace myplugin::python {

// The engine calls from its own threads, and jaxlib releases the GIL while it
// waits for a program, so taking the GIL here cannot deadlock with the caller.
class GilHold {
 public:
  GilHold() : state_(PyGILState_Ensure()) {}
  ~GilHold() { PyGILState_Release(state_); }
  GilHold(const GilHold&) = delete;
  GilHold& operator=(const GilHold&) = delete;

 private:
  PyGILState_STATE state_;
};

// Owns one reference (null allowed).
class PyRef {
 public:
  explicit PyRef(PyObject* o = nullptr) : o_(o) {}
  ~PyRef() { Py_XDECREF(o_); }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  PyObject* get() const { return o_; }

 private:
  PyObject* o_;
};

// `slot` takes a reference to `value` (null allowed) and drops the one it
// held: a handler's Python dispatcher, replaced under the GIL.
void ReplaceReference(PyObject*& slot, PyObject* value);

// str(o), or a placeholder when it cannot be printed.
std::string Str(PyObject* o);

// The pending Python exception, as the error the caller of the program sees:
// its type and message first (jax raises it as a JaxRuntimeError), then the
// traceback of the callback. Clears it.
Status TakePythonError();

}  // namespace myplugin::python

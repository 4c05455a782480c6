#include "python/python_call.h"

namespace myplugin::python {

void ReplaceReference(PyObject*& slot, PyObject* value) {
  Py_XINCREF(value);
  Py_XDECREF(slot);
  slot = value;
}

std::string Str(PyObject* o) {
  if (o == nullptr) return "";
  PyObject* s = PyObject_Str(o);
  if (s == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  const char* c = PyUnicode_AsUTF8(s);
  std::string out = c ? c : "<unprintable>";
  if (c == nullptr) PyErr_Clear();
  Py_DECREF(s);
  return out;
}

Status TakePythonError() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string name = "exception";
  if (type != nullptr) {
    if (PyObject* n = PyObject_GetAttrString(type, "__qualname__")) {
      name = Str(n);
      Py_DECREF(n);
    } else {
      PyErr_Clear();
    }
  }
  std::string text = "the Python callback raised " + name + ": " + Str(value);
  if (PyObject* mod = PyImport_ImportModule("traceback")) {
    if (PyObject* lines = PyObject_CallMethod(mod, "format_exception", "OOO", type ? type : Py_None,
                                              value ? value : Py_None, tb ? tb : Py_None)) {
      PyObject* empty = PyUnicode_FromString("");
      if (PyObject* joined = PyUnicode_Join(empty, lines)) {
        text += "\n" + Str(joined);
        Py_DECREF(joined);
      }
      Py_XDECREF(empty);
      Py_DECREF(lines);
    }
    Py_DECREF(mod);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return Status(Code::kUnknown, text);
}

}  // namespace myplugin::python

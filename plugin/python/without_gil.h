// Every binding that may block (a network round trip, a collective, a
// barrier) runs its C++ without the GIL, so that the process's other Python
// threads (the straggler watch's stack capture among them) keep running.
// The result is built while the GIL is released and handed back once it is
// held again; it must not touch Python objects.
#pragma once

#include <nanobind/nanobind.h>

namespace myplugin::python {

template <typename Fn>
auto WithoutGil(Fn&& fn) -> decltype(fn()) {
  nanobind::gil_scoped_release release;
  return fn();
}

}  // namespace myplugin::python

// One line to stderr in a single write(2), so that lines from several
// threads (and the Python side of the process) never interleave mid-line.
#pragma once

#include <unistd.h>

#include <string>

namespace myplugin {

inline void LogLine(const std::string& line) {
  std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = write(2, out.data() + done, out.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace myplugin

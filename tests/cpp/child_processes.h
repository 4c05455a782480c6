// Children of the unit-test binary, for the tests of what several processes
// do together: each runs this binary with its own arguments (main.cc routes
// them), and the test reads what each printed (stdout and stderr) and how
// it ended, within a hard deadline past which every child's process group
// (each child leads one) is killed.
#pragma once

#include <string>
#include <vector>

namespace unit {

struct ChildResult {
  int status = -1;          // waitpid's
  std::string output;       // stdout (and stderr, when asked), interleaved as written
  bool killed = false;      // still running at the deadline (killed then, with its group)
};

// Starts one child per entry of `args` (the arguments after the program
// name) and returns when all have closed their output, or at `deadline_s`.
// `with_stderr`: stderr is read too (else the test's own).
std::vector<ChildResult> RunChildren(const std::vector<std::vector<std::string>>& args, double deadline_s,
                                     bool with_stderr = false);

// The lines of `text`, each without its newline.
std::vector<std::string> Lines(const std::string& text);

}  // namespace unit

"""In-process tests compare myplugin with jax's own CPU backend, both with
8 devices, in one process. Tests that need a fresh process (backend
options, bad input) start children through proc.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

os.environ["JAX_PLATFORMS"] = "myplugin,cpu"
os.environ["MYPLUGIN_NUM_DEVICES"] = "8"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"


# Where the time goes: each test file's wall time (setup, call and teardown
# of its tests), the slowest first, at the end of every run (.ci/run's rows
# print it, so a slow file is seen where it lands).
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
  path = report.nodeid.split("::", 1)[0]
  _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
  # An xdist worker has a summary too, of its own files: the controller's
  # has them all (and a worker's would write each file's time twice).
  if not _FILE_SECONDS or hasattr(terminalreporter.config, "workerinput"):
    return
  # .ci/run gathers every run's times here and prints the slowest files of
  # all its rows at its end.
  gathered = os.environ.get("PYTEST_FILE_TIMES")
  if gathered:
    row = f"{sys.version_info.major}.{sys.version_info.minor}"
    with open(gathered, "a") as f:
      for path, seconds in _FILE_SECONDS.items():
        f.write(f"{seconds:.1f}\t{row}\t{path}\n")
  total = sum(_FILE_SECONDS.values())
  terminalreporter.write_sep("-", f"time per test file ({total:.0f} s in all)")
  for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1]):
    terminalreporter.write_line(f"{seconds:8.1f} s  {path}")

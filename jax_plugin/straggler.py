"""The Python half of the straggler watch and the flight recorder.

The watch itself is C++ (plugin/collectives/straggler_watch.cc): its threads
run whatever this process's Python is doing. Python contributes one thing C++
cannot do safely: the stacks of the Python threads. faulthandler's handler for
a signal writes every thread's stack without taking the GIL, so it answers
while the main thread holds the GIL in a long C call or waits for it; the
watch raises that signal on its own thread and reads the file back.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import socket
import tempfile

from jax_plugin import _myplugin

# A real-time signal that nothing in jax or the engine uses: faulthandler's
# handler takes it over for the stack captures.
STACK_SIGNAL = int(signal.SIGRTMAX) - 2

_stack_file = None


def _open_stack_file():
  try:
    fd = os.memfd_create("myplugin-stacks", os.MFD_CLOEXEC)
  except (AttributeError, OSError):  # no memfd: an unlinked temp file serves as well
    return tempfile.TemporaryFile(buffering=0)
  return open(fd, "w+b", buffering=0)


def check_settings() -> None:
  """Reads the settings C++ uses (plugin/common/settings.h) for this process,
  before it joins a job; raises INVALID_ARGUMENT naming a malformed one
  (MYPLUGIN_STRAGGLER_SECONDS, MYPLUGIN_TRACE_BUFFER, MYPLUGIN_TRANSPORT, ...)."""
  _myplugin.settings_load()


def start() -> None:
  """Starts the watch for the job this process just joined (every process
  calls it from distributed initialization)."""
  global _stack_file
  if _stack_file is None:
    _stack_file = _open_stack_file()
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)
  _myplugin.straggler_watch_start(STACK_SIGNAL, _stack_file.fileno(), os.getpid(), socket.gethostname())


def dump_flight_recorder(reason: str = "requested by the program") -> str | None:
  """Writes this process's flight recorder into the job's trace folder now;
  returns the folder (None outside a job)."""
  folder = _myplugin.flight_recorder_dump(reason)
  return folder or None

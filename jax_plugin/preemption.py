"""jax's preemption sync point on myplugin's coordination service:
`multihost_utils.reached_preemption_sync_point(step)`, which orbax's
`CheckpointManager` asks at every step.

A preemption notice is SIGTERM to any process of the job (what a scheduler
sends before it kills), or `notice()`. The noticed process records the
notice in the service's key-value store. Every process watches for it in a
background thread; on seeing it, each posts the last step it passed to
`reached_sync_point` and, once every process has posted, takes the largest
plus one as the sync step: a step that no process had passed, so every
process reaches it (jax's own protocol). `reached_sync_point(step)` is true
at that step on every process and false at every other. While the processes
agree, `reached_sync_point` waits for the answer, so that no process passes
the sync step before it is known (the agreement needs only the watchers, not
the training loops, so this cannot deadlock).

The SIGTERM handler is installed by the first `reached_sync_point` call on
the main thread: a program that never asks keeps SIGTERM's default action.
In front of it goes a C++ one (`_myplugin.install_sigterm_notice`) that
records the notice at once from a thread of its own: Python runs its
handler only when the main thread next runs Python, which a long XLA
compile holds off (the other processes would run on meanwhile, and the
compiling one then catch up on all their steps).
A second SIGTERM, or one that comes after the job has failed, gets the
action of the handler that was there before (by default, the end of the
process).
"""

from __future__ import annotations

import os
import signal
import threading

from jax_plugin import _myplugin, errors

_NOTICE = b"myplugin/preemption/notice"
_STEPS = "myplugin/preemption/step/"
# How long one wait of the watcher lasts before it looks at its stop flag
# (shutdown waits for it: its call must not outlive the client).
_WATCH_S = 0.25


class PreemptionSyncManager:
  """The object jax keeps in `jax._src.distributed.global_state.preemption_sync_manager`."""

  def __init__(self, process_id: int, num_processes: int, agreement_timeout_s: float):
    self._process_id = process_id
    self._num_processes = num_processes
    self._agreement_timeout_s = agreement_timeout_s
    self._cv = threading.Condition()
    self._last_step = -1  # the last step passed to reached_sync_point
    self._noticed_here = False
    self._agreeing = False
    self._sync_step: int | None = None
    self._error: str | None = None
    self._stop = threading.Event()
    self._watcher: threading.Thread | None = None
    self._previous_handler = None

  # -- jax's interface
  def initialize(self, client=None) -> None:
    del client  # ours is the process's coordination client

  def reached_sync_point(self, step_id: int) -> bool:
    self._start()
    step = int(step_id)
    with self._cv:
      self._last_step = step
      if self._agreeing and self._sync_step is None and self._error is None:
        self._cv.wait_for(lambda: self._sync_step is not None or self._error is not None,
                          timeout=self._agreement_timeout_s + 5)
      if self._error is not None:
        raise RuntimeError(f"myplugin: the preemption sync point could not be agreed: {self._error}")
      return self._sync_step is not None and step == self._sync_step

  def shutdown(self) -> None:
    self._stop.set()
    watcher = self._watcher
    if watcher is not None and watcher is not threading.current_thread():
      watcher.join(timeout=_WATCH_S * 4)
    if self._previous_handler is not None and threading.current_thread() is threading.main_thread():
      signal.signal(signal.SIGTERM, self._previous_handler)
      self._previous_handler = None

  # -- the notice
  def notice(self) -> None:
    """A preemption notice from this process (what SIGTERM gives)."""
    try:
      _myplugin.kv_insert(_NOTICE, str(self._process_id).encode())
    except errors.MypluginError as e:
      if e.code != "ALREADY_EXISTS":  # another process noticed first: the same notice
        raise

  def _on_sigterm(self, signum, frame):
    if self._noticed_here or _myplugin.failure() is not None:
      previous = self._previous_handler
      signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
      self._previous_handler = None
      if callable(previous):
        previous(signum, frame)
      else:
        os.kill(os.getpid(), signal.SIGTERM)
      return
    self._noticed_here = True
    try:
      self.notice()
    except RuntimeError as e:
      with self._cv:
        self._error = f"process {self._process_id} could not record its SIGTERM: {e}"
        self._cv.notify_all()

  # -- the agreement
  def _start(self) -> None:
    if self._watcher is not None:
      return
    if threading.current_thread() is threading.main_thread():
      self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
      _myplugin.install_sigterm_notice(_NOTICE, str(self._process_id).encode())
    self._watcher = threading.Thread(target=self._watch, name="myplugin-preemption", daemon=True)
    self._watcher.start()

  def _watch(self) -> None:
    while not self._stop.is_set():
      try:
        _myplugin.kv_get(_NOTICE, _WATCH_S)
        break
      except RuntimeError as e:
        if getattr(e, "code", None) != "DEADLINE_EXCEEDED":
          return  # the job ended (or failed): nothing to agree on
    else:
      return
    with self._cv:
      self._agreeing = True
      mine = self._last_step
    try:
      _myplugin.kv_set(f"{_STEPS}{self._process_id}".encode(), str(mine).encode())
      steps = [int(_myplugin.kv_get(f"{_STEPS}{p}".encode(), self._agreement_timeout_s))
               for p in range(self._num_processes)]
    except (RuntimeError, ValueError) as e:
      with self._cv:
        self._error = str(e)
        self._cv.notify_all()
      return
    with self._cv:
      self._sync_step = max(steps) + 1
      self._cv.notify_all()

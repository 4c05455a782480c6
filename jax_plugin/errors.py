"""What failed in a myplugin job, as typed exceptions.

Every class is a subclass of jax's runtime error (``jax.errors.JaxRuntimeError``,
which jaxlib also calls ``XlaRuntimeError``), so code that catches jax's
error catches ours, and its text is what it was (``"DEADLINE_EXCEEDED:
..."``). The class and its fields come from the status that C++ sends (its
code and failure kind, common/status.h), never from the text:

- :class:`MypluginError`: any error of ours. ``code`` (``"ABORTED"``, ...),
  ``processes`` (a tuple of process ids), ``collective`` (the call or
  barrier, or None) and ``call`` (the call's number on its process group, or
  None).
- :class:`PeerFailure`: a process of the job failed or left; ``processes``
  names it.
- :class:`CollectiveTimeout`: a collective or barrier waited past its bound;
  ``processes`` are those it waited for (empty when data stopped moving on
  every link, or the call reached its cap).
- :class:`CollectiveMismatch`: processes issued different collectives;
  ``processes`` are those whose call differs from this process's.
- :class:`CoordinationError`: the coordination service is unreachable or
  stopped answering.

Calls through ``jax_plugin`` (``jax_plugin.distributed``, ``collectives``,
jax's distributed client) raise these directly. A collective inside a
running jax program fails in jaxlib, which builds its own exception from
the error's text; the runtime keeps the failure's fields, and
:func:`typed` (or the :func:`typed_errors` context manager) gives the typed
exception for it. README, "Errors", has an example.

The classes are made on first use (their base is jaxlib's, and importing
jaxlib is not free): import them by name, ``from jax_plugin.errors import
PeerFailure``.
"""

from __future__ import annotations

import contextlib
import sys

from jax_plugin import _myplugin

__all__ = ["MypluginError", "PeerFailure", "CollectiveTimeout", "CollectiveMismatch", "CoordinationError", "typed",
           "typed_errors"]

_classes: dict | None = None


def _jax_runtime_error() -> type:
  """jax's runtime error: jax.errors.JaxRuntimeError, also exported by jaxlib
  as xla_client.XlaRuntimeError (jaxlib 0.10 to 0.12), which avoids
  importing jax itself (this may run while jax is being imported)."""
  errors = sys.modules.get("jax.errors")
  if errors is not None and hasattr(errors, "JaxRuntimeError"):
    return errors.JaxRuntimeError
  try:
    from jaxlib import xla_client
    return xla_client.XlaRuntimeError
  except (ImportError, AttributeError):
    from jax.errors import JaxRuntimeError
    return JaxRuntimeError


def _build() -> dict:
  global _classes
  if _classes is not None:
    return _classes
  base = _jax_runtime_error()

  class MypluginError(base):
    """An error of myplugin's runtime (see the module's docstring)."""

    def __init__(self, message: str, *, code: str = "UNKNOWN", processes=(), collective: str | None = None,
                 call: int | None = None):
      super().__init__(message)
      self.code = code
      self.processes = tuple(int(p) for p in processes)
      self.collective = collective
      self.call = call

  class PeerFailure(MypluginError):
    """A process of the job failed or left; ``processes`` names it."""

  class CollectiveTimeout(MypluginError):
    """A collective or barrier waited past its bound; ``processes``: those it waited for."""

  class CollectiveMismatch(MypluginError):
    """Processes issued different collectives; ``processes``: those whose call differs from this one's."""

  class CoordinationError(MypluginError):
    """The coordination service is unreachable or stopped answering."""

  made = {c.__name__: c for c in (MypluginError, PeerFailure, CollectiveTimeout, CollectiveMismatch,
                                  CoordinationError)}
  for c in made.values():
    c.__module__ = __name__
  made["by_kind"] = {_myplugin.FailureKind.none: MypluginError, _myplugin.FailureKind.peer_failure: PeerFailure,
                     _myplugin.FailureKind.timeout: CollectiveTimeout,
                     _myplugin.FailureKind.mismatch: CollectiveMismatch,
                     _myplugin.FailureKind.coordination: CoordinationError}
  _classes = made
  return made


def __getattr__(name):
  if name in __all__ and name not in ("typed", "typed_errors"):
    return _build()[name]
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _from_status(code: str, text: str, kind, processes, collective: str, call: int) -> BaseException:
  """The exception for a status C++ sends: (code's name, "CODE: message",
  failure kind, processes, collective or "", call or -1)."""
  try:
    cls = _build()["by_kind"][kind]
    return cls(text, code=code, processes=processes, collective=collective or None,
               call=call if call >= 0 else None)
  except Exception:  # never lose the error itself (at interpreter exit, say)
    return RuntimeError(text)


def error(code: str, message: str, *, cls: str = "MypluginError", **fields) -> BaseException:
  """An error of ours raised from Python, with its code and fields."""
  return _build()[cls](f"{code}: {message}", code=code, **fields)


def typed(exc: BaseException) -> BaseException:
  """The typed error for `exc`, an exception that a running jax program
  raised (jaxlib raises its JaxRuntimeError, and for some codes ValueError:
  an ABORTED collective on jax 0.10.2): the typed exception of the failure
  that this process's collectives reported since the last call, with
  `exc`'s text and `exc` as its cause; `exc` itself when they reported none,
  or when it is one of ours already. Each reported failure is taken once, so
  an unrelated error later is not taken for it (every later collective of a
  failed process group reports it again)."""
  classes = _build()
  if isinstance(exc, classes["MypluginError"]) or not isinstance(exc, Exception):
    return exc
  fields = _myplugin.take_collective_failure()
  if fields is None:
    return exc
  code, _, kind, processes, collective, call = fields
  typed_exc = _from_status(code, str(exc), kind, processes, collective, call)
  typed_exc.__cause__ = exc
  return typed_exc


@contextlib.contextmanager
def typed_errors():
  """Re-raises a jax runtime error of a failed collective as its typed
  exception (:func:`typed`), from the original."""
  try:
    yield
  except Exception as e:
    t = typed(e)
    if t is e:
      raise
    raise t from e


_myplugin.set_error_factory(_from_status)

"""What a worker reports of an exception it caught: its text, and the class
and fields that jax_plugin.errors gives it (jax's runtime error of a running
program is typed first, through errors.typed)."""
from jax_plugin import errors


def error_fields(e: BaseException) -> dict:
  t = errors.typed(e)
  jax_error = errors._jax_runtime_error()
  return {"error": str(e), "class": type(t).__name__, "jax_error": isinstance(t, jax_error),
          "code": getattr(t, "code", None), "processes": list(getattr(t, "processes", ())),
          "collective": getattr(t, "collective", None), "call": getattr(t, "call", None)}

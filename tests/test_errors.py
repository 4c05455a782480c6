"""jax_plugin.errors in one process: the classes are jax's runtime error,
a binding's error arrives typed with the code C++ sent, and typed() leaves
an error alone when no collective failed. The failures themselves (a peer
killed or stopped, a barrier's timeout, a mismatch, inside and outside a
running program) are in test_collectives, test_coordination,
test_multiprocess_programs and test_recovery."""
import jax
import pytest

from jax_plugin import _myplugin, errors

CLASSES = ["MypluginError", "PeerFailure", "CollectiveTimeout", "CollectiveMismatch", "CoordinationError"]


@pytest.mark.parametrize("name", CLASSES)
def test_every_class_is_jax_runtime_error(name):
  cls = getattr(errors, name)
  assert issubclass(cls, jax.errors.JaxRuntimeError) and issubclass(cls, RuntimeError)
  assert issubclass(cls, errors.MypluginError)
  assert cls.__module__ == "jax_plugin.errors"
  assert name in errors.__all__


def test_a_bindings_error_carries_its_code_not_only_its_text():
  with pytest.raises(errors.MypluginError) as caught:
    _myplugin.kv_get(b"k", 0.1)  # no job joined
  e = caught.value
  assert type(e) is errors.MypluginError and isinstance(e, jax.errors.JaxRuntimeError)
  assert e.code == "FAILED_PRECONDITION" and str(e).startswith("FAILED_PRECONDITION: ")
  assert (e.processes, e.collective, e.call) == ((), None, None)


def test_the_factory_maps_each_kind_to_its_class():
  kinds = {_myplugin.FailureKind.none: "MypluginError", _myplugin.FailureKind.peer_failure: "PeerFailure",
           _myplugin.FailureKind.timeout: "CollectiveTimeout", _myplugin.FailureKind.mismatch: "CollectiveMismatch",
           _myplugin.FailureKind.coordination: "CoordinationError"}
  for kind, name in kinds.items():
    e = errors._from_status("ABORTED", "ABORTED: x", kind, [3, 1], "all-reduce sum f32[8]", 7)
    assert type(e).__name__ == name
    assert (e.code, e.processes, e.collective, e.call, str(e)) == ("ABORTED", (3, 1), "all-reduce sum f32[8]", 7,
                                                                   "ABORTED: x")


def test_typed_leaves_other_errors_alone():
  _myplugin.forget_collective_failure()
  plain = jax.errors.JaxRuntimeError("INTERNAL: something else")
  assert errors.typed(plain) is plain  # no collective failed
  other = ValueError("x")
  assert errors.typed(other) is other
  ours = errors.error("NOT_FOUND", "k")
  assert errors.typed(ours) is ours
  with pytest.raises(ValueError):
    with errors.typed_errors():
      raise other


def test_the_summary_repeats_a_long_reason_by_its_start():
  """myplugin-run's summary says the start of a long failure reason and
  refers to the rest, which each rank's own output says in full."""
  from jax_plugin.launcher import short_reason
  assert short_reason("process 1 failed: exited with an uncaught exception: ValueError: bad step") == \
      "process 1 failed: exited with an uncaught exception: ValueError: bad step"
  long = "process 1 failed: exited with an uncaught exception: JaxRuntimeError: collective mismatch: " + "x" * 300
  said = short_reason(long)
  assert said.startswith(long[:100]) and said.endswith("… (in full above)") and len(said) < 160
  assert short_reason("KeyError: 'a'\nmore lines") == "KeyError: 'a'… (in full above)"

"""Collectives across processes and devices on numpy arrays: the layer that
compiled programs use, callable directly (tests, benchmarks, tools).

Every call takes, per process, one array per local device of the device group
(a list), or one array when the process has one device there. A device group is a
list of global device ids in rank order (device d lives in process
d // devices_per_process); None means every device of the job. The devices
of a process combine in memory; one rank per process goes over the wire.
Results are new arrays, or the caller's (out=, one array or a list like
the input): reusing one spares the page faults of a fresh large array on
every call (above 32 MB, malloc maps new pages each time).

Every participant must make the same call. One that issues a different op,
shape or dtype, or calls in a different order, gets an error naming who
issued what; a dead or stalled process is named too. Needs
jax_plugin.distributed (or myplugin-run) when the device group spans processes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jax_plugin import _myplugin, errors  # errors: our bindings raise its classes


def _dtype_name(a: np.ndarray) -> str:
  return "bool" if a.dtype == np.bool_ else a.dtype.name


def _bytes(a: np.ndarray) -> np.ndarray:
  return a.reshape(-1).view(np.uint8)


def _join_first() -> None:
  """A process started as part of a job (myplugin-run, MYPLUGIN_* variables)
  that has not joined yet joins now: acting alone would give a silent wrong
  result (an all-reduce of one process's data)."""
  from jax_plugin import distributed
  if not distributed.is_initialized():
    distributed.initialize_from_environment()


def _outputs(op: str, out, arrays, single: bool, out_shape_of):
  """Fresh arrays, or the caller's `out` checked: a result written into
  memory a call still reads would be a silent wrong result, so only an
  all-reduce of one array may write over its own input."""
  if out is None:
    return [np.empty(out_shape_of(a.shape), dtype=a.dtype) for a in arrays]
  outs = [out] if single else list(out)
  if len(outs) != len(arrays):
    raise ValueError(f"{op}: out holds {len(outs)} arrays for {len(arrays)} inputs")
  for a, o in zip(arrays, outs):
    want = out_shape_of(a.shape)
    if not isinstance(o, np.ndarray) or o.shape != want or o.dtype != a.dtype:
      got = f"{o.dtype}{list(o.shape)}" if isinstance(o, np.ndarray) else type(o).__name__
      raise ValueError(f"{op}: out must be a {a.dtype}{list(want)} array, not {got}")
    if not (o.flags.c_contiguous and o.flags.writeable):
      raise ValueError(f"{op}: out must be C-contiguous and writeable")
    for b in arrays:
      same = o.__array_interface__["data"][0] == b.__array_interface__["data"][0] and o.nbytes == b.nbytes
      if np.shares_memory(o, b) and not (op == "all_reduce" and single and same):
        raise ValueError(f"{op}: out overlaps an input (only all_reduce of one array may run in place, out=x)")
  return outs


def _run(op: str, xs, out_shape_of, reduction: str = "", device_group=None, pairs=(), out=None):
  _join_first()
  single = not isinstance(xs, (list, tuple))
  arrays = [np.asarray(x, order="C") for x in ([xs] if single else xs)]  # keeps 0-d arrays 0-d
  if not arrays:
    raise ValueError("no local buffers")
  outs = _outputs(op, out, arrays, single, out_shape_of)
  _myplugin.collective(op, reduction, _dtype_name(arrays[0]), [_bytes(a) for a in arrays],
                       [_bytes(o) for o in outs], list(device_group or []), [tuple(p) for p in pairs])
  return outs[0] if single else outs


def device_group_size(device_group: Sequence[int] | None = None) -> int:
  _join_first()
  return len(device_group) if device_group else _myplugin.local_device_count() * _myplugin.num_processes()


def all_reduce(xs, op: str = "sum", device_group: Sequence[int] | None = None, out=None):
  """op: sum, product, min, max (and/or for bool)."""
  return _run("all_reduce", xs, lambda s: s, op, device_group, out=out)


def all_gather(xs, device_group: Sequence[int] | None = None, out=None):
  """Every device's input stacked on a new leading axis, in rank order."""
  n = device_group_size(device_group)
  return _run("all_gather", xs, lambda s: (n,) + s, "", device_group, out=out)


def _blocks(shape, n, what):
  if len(shape) == 0 or shape[0] % n:
    raise ValueError(f"{what}: axis 0 of shape {shape} must divide by {n} devices")


def reduce_scatter(xs, op: str = "sum", device_group: Sequence[int] | None = None, out=None):
  """Reduces over the devices; each gets its rank's block of axis 0."""
  n = device_group_size(device_group)

  def shape(s):
    _blocks(s, n, "reduce_scatter")
    return (s[0] // n,) + s[1:]

  return _run("reduce_scatter", xs, shape, op, device_group, out=out)


def all_to_all(xs, device_group: Sequence[int] | None = None, out=None):
  """Block i of axis 0 goes to rank i; each gets the blocks sent to it, in rank order."""
  n = device_group_size(device_group)

  def shape(s):
    _blocks(s, n, "all_to_all")
    return s

  return _run("all_to_all", xs, shape, "", device_group, out=out)


def collective_permute(xs, pairs: Sequence[tuple[int, int]], device_group: Sequence[int] | None = None, out=None):
  """pairs: (source rank, target rank). A rank that receives nothing gets zeros."""
  return _run("collective_permute", xs, lambda s: s, "", device_group, pairs, out=out)


def barrier(processes: Sequence[int] | None = None) -> None:
  """A barrier of processes (every process of the job by default)."""
  _join_first()
  _myplugin.collective_barrier(list(processes or []))

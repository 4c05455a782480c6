"""Collectives across processes on numpy arrays: the communicator layer
that compiled programs use, callable directly (for tests, benchmarks and
tools). Every process of the clique must make the same call; a process
that issues a different op, shape or dtype, or calls in a different order,
gets an error naming who issued what. Needs jax_plugin.distributed (or
myplugin-run).

A clique is a list of process ids in rank order; None means all.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jax_plugin import _myplugin


def _dtype_name(a: np.ndarray) -> str:
  return "bool" if a.dtype == np.bool_ else a.dtype.name


def _bytes(a: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _run(op: str, x, out_shape, reduction: str = "", clique=None, pairs=()) -> np.ndarray:
  x = np.ascontiguousarray(x)
  out = np.empty(out_shape, dtype=x.dtype)
  _myplugin.collective(op, reduction, _dtype_name(x), _bytes(x), _bytes(out), list(clique or []),
                       [tuple(p) for p in pairs])
  return out


def _size(clique) -> int:
  return len(clique) if clique else _myplugin.num_processes()


def all_reduce(x, op: str = "sum", clique: Sequence[int] | None = None) -> np.ndarray:
  """op: sum, product, min, max (and/or for bool)."""
  x = np.asarray(x)
  return _run("all_reduce", x, x.shape, op, clique)


def all_gather(x, clique: Sequence[int] | None = None) -> np.ndarray:
  """Stacks every process's x along a new leading axis, in rank order."""
  x = np.asarray(x)
  return _run("all_gather", x, (_size(clique),) + x.shape, "", clique)


def reduce_scatter(x, op: str = "sum", clique: Sequence[int] | None = None) -> np.ndarray:
  """Reduces x over the processes and returns this rank's block of axis 0."""
  x = np.asarray(x)
  n = _size(clique)
  if x.ndim == 0 or x.shape[0] % n:
    raise ValueError(f"reduce_scatter: axis 0 of shape {x.shape} must divide by {n} processes")
  return _run("reduce_scatter", x, (x.shape[0] // n,) + x.shape[1:], op, clique)


def all_to_all(x, clique: Sequence[int] | None = None) -> np.ndarray:
  """Block i of axis 0 goes to rank i; the result holds block `rank` of every rank, in rank order."""
  x = np.asarray(x)
  n = _size(clique)
  if x.ndim == 0 or x.shape[0] % n:
    raise ValueError(f"all_to_all: axis 0 of shape {x.shape} must divide by {n} processes")
  return _run("all_to_all", x, x.shape, "", clique)


def collective_permute(x, pairs: Sequence[tuple[int, int]], clique: Sequence[int] | None = None) -> np.ndarray:
  """pairs: (source rank, target rank). A rank that receives nothing gets zeros."""
  x = np.asarray(x)
  return _run("collective_permute", x, x.shape, "", clique, pairs)


def barrier(clique: Sequence[int] | None = None) -> None:
  _myplugin.collective("barrier", "", "u8", np.zeros(0, np.uint8), np.zeros(0, np.uint8), list(clique or []), [])


def rank(clique: Sequence[int] | None = None) -> int:
  """This process's rank in the clique."""
  return _myplugin.clique_rank(list(clique or []))

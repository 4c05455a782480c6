"""A process of a collectives test job (identity from MYPLUGIN_*).

usage: python collectives_worker.py SCENARIO
  matrix      every op x dtype x reduction x size against numpy; prints a RESULT per failure
  big         one 64 MB all-reduce
  mismatch_*  this process issues something different from the others (rank 1 deviates)
  loop_big    64 MB all-reduces until an error
  left_behind a permute in which process 2 needs nothing of process 1 (1 -> 0,
              0 -> 2), then an all-reduce: process 2 moves on while process 0
              still waits for process 1's data
  long_call   one all-reduce of MB (argv[2]) megabytes per process: its time and
              whether it equals numpy's sum, or its error
  big_ops     every op on 64 MB per process against numpy
  out         results into the caller's arrays (out=), in place too; bad ones refused
Every RESULT says which transport carried the calls ("shm" when this
process maps the shared-memory transport's segment, else "gloo").
TEST_FAULT_DELAYS ("point=seconds,...", points of _myplugin.FaultPoint) widens
the error path's races on process TEST_FAULT_PROCESS; TEST_FATE_SHARING=0 keeps a
process alive after the job failed, to report its own error.
"""
import json
import os
import sys
import time

import ml_dtypes
import numpy as np

from jax_plugin import _myplugin
from jax_plugin import collectives as C
from jax_plugin import distributed
from error_fields import error_fields

scenario = sys.argv[1]
distributed.initialize(heartbeat_timeout_seconds=float(os.environ.get("TEST_HEARTBEAT_TIMEOUT", "5")),
                       fate_sharing=os.environ.get("TEST_FATE_SHARING", "1") == "1")
r, n_proc = distributed.process_id(), distributed.num_processes()
if os.environ.get("TEST_FAULT_DELAYS") and int(os.environ.get("TEST_FAULT_PROCESS", "-1")) == r:
  for item in os.environ["TEST_FAULT_DELAYS"].split(","):
    point, seconds = item.split("=")
    _myplugin.set_fault_delay(getattr(_myplugin.FaultPoint, point), float(seconds))
D = distributed.global_topology()[r]["num_devices"]  # local devices
n = n_proc * D  # devices in the job: the ranks of the default device group
mine_ranks = [r * D + j for j in range(D)]


def segments():
  """The shared-memory transport's segments this process maps."""
  with open("/proc/self/maps") as f:
    return sorted({line.split()[-2] if line.endswith("(deleted)\n") else line.split()[-1]
                   for line in f if "memfd:myplugin-collectives" in line})


def result(**kv):
  print("RESULT " + json.dumps(dict(kv, transport="shm" if segments() else "gloo", segments=segments())),
        flush=True)


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128"]
SIZES = [0, 1, 7, 1000, (1 << 20) + 3]


def np_dtype(name):
  return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def data(rank, dtype, size, kind="sum"):
  """Inputs whose reductions are exact in every dtype: small integers, and
  for products only 1, 2 and -1."""
  i = np.arange(size)
  if dtype == "bool":
    return ((i + rank) % 3 == 0)
  if kind == "product":
    v = np.where((i + rank) % 5 == 0, 2, np.where((i + rank) % 7 == 0, -1, 1))
    if dtype.startswith("uint"):
      v = np.abs(v)
  else:
    v = (i * 7 + rank * 3) % 11 - (0 if dtype.startswith("uint") else 5)
  if dtype.startswith("complex"):
    return (v + 1j * (v % 3)).astype(dtype)
  return v.astype(np_dtype(dtype))


def reduce_ref(arrays, op, dtype):
  acc = arrays[0].astype(np.complex128 if dtype.startswith("complex") else (bool if dtype == "bool" else np.float64))
  for a in arrays[1:]:
    a = a.astype(acc.dtype)
    if dtype == "bool":
      acc = (acc | a) if op in ("sum", "or", "max") else (acc & a)
    elif op == "sum":
      acc = acc + a
    elif op == "product":
      acc = acc * a
    elif op == "min":
      acc = np.minimum(acc, a)
    else:
      acc = np.maximum(acc, a)
  return acc.astype(np_dtype(dtype)) if dtype != "bool" else acc


def same(a, b):
  return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.astype(np.complex128) if a.dtype.kind == "c" else
                                                                     a.astype(np.float64) if a.dtype.kind in "fV" or a.dtype == ml_dtypes.bfloat16 else a,
                                                                     b.astype(np.complex128) if b.dtype.kind == "c" else
                                                                     b.astype(np.float64) if b.dtype.kind in "fV" or b.dtype == ml_dtypes.bfloat16 else b)


if scenario == "matrix":
  failures, checked = [], 0
  sizes = SIZES if os.environ.get("TEST_LARGE", "1") == "1" else SIZES[:-1]

  def check(name, got, wants):
    global checked
    checked += 1
    if len(got) != len(wants) or not all(same(g, w) for g, w in zip(got, wants)):
      failures.append(name)

  for dtype in DTYPES:
    ops = ["or", "and"] if dtype == "bool" else (["sum", "product"] if dtype.startswith("complex") else
                                                 ["sum", "product", "min", "max"])
    for size in sizes:
      if size > 1000 and dtype not in ("float32", "int64", "bfloat16", "bool"):
        continue  # the large size on a few types keeps the job short
      for op in ops:
        kind = "product" if op == "product" else "sum"
        got = C.all_reduce([data(g, dtype, size, kind) for g in mine_ranks], op)
        want = reduce_ref([data(k, dtype, size, kind) for k in range(n)], op, dtype)
        check(f"all_reduce {op} {dtype}[{size}]", got, [want] * D)
      xs = [data(g, dtype, size) for g in mine_ranks]
      stacked = np.stack([data(k, dtype, size) for k in range(n)])
      check(f"all_gather {dtype}[{size}]", C.all_gather(xs), [stacked] * D)
      block = size - size % n
      if block:
        op = "or" if dtype == "bool" else "sum"
        want = reduce_ref([data(k, dtype, size)[:block] for k in range(n)], op, dtype).reshape(n, -1)
        check(f"reduce_scatter {dtype}[{block}]", C.reduce_scatter([x[:block] for x in xs], op),
              [want[g] for g in mine_ranks])
        wants = [np.concatenate([data(k, dtype, size)[:block].reshape(n, -1)[g] for k in range(n)])
                 for g in mine_ranks]
        check(f"all_to_all {dtype}[{block}]", C.all_to_all([x[:block] for x in xs]), wants)
      # A ring shift, and a partial permutation where rank 0 receives nothing.
      check(f"collective_permute ring {dtype}[{size}]",
            C.collective_permute(xs, [(k, (k + 1) % n) for k in range(n)]),
            [data((g - 1) % n, dtype, size) for g in mine_ranks])
      check(f"collective_permute partial {dtype}[{size}]",
            C.collective_permute(xs, [(k, k + 1) for k in range(n - 1)]),
            [np.zeros_like(xs[0]) if g == 0 else data(g - 1, dtype, size) for g in mine_ranks])
  # Random floats: tolerance, since the ring adds in another order than numpy.
  rng = np.random.default_rng(0)
  rand = [rng.standard_normal(10007).astype(np.float32) for _ in range(n)]
  got = C.all_reduce([rand[g] for g in mine_ranks])
  checked += 1
  if not all(np.allclose(x, np.sum(np.stack(rand).astype(np.float64), axis=0), rtol=1e-5, atol=1e-5) for x in got):
    failures.append("all_reduce sum random f32")
  # A device group of every other device (when there are several per process).
  if n >= 4:
    sub = list(range(0, n, 2))
    local = [g for g in mine_ranks if g in sub]
    if local:  # a sub-group has a communicator (and call numbers) of its own
      got = C.all_reduce([np.full(3, g, np.int32) for g in local], "sum", device_group=sub)
      check("all_reduce on a sub-group", got, [np.full(3, sum(sub), np.int32)] * len(local))
  C.barrier()
  result(event="matrix", checked=checked, failures=failures)

elif scenario == "big":
  x = np.full(16 << 20, float(r + 1), np.float32)  # 64 MB
  got = C.all_reduce(x)
  result(event="big", ok=bool(np.all(got == n * (n + 1) / 2)), nbytes=int(x.nbytes))

elif scenario == "big_ops":
  per = 16 << 20  # float32 elements: 64 MB per process
  ref = [np.arange(per, dtype=np.float32) % 1000 + k for k in range(n)]
  mine = [ref[g] for g in mine_ranks]
  failures = []
  if not all(np.array_equal(x, np.sum(np.stack(ref), axis=0)) for x in C.all_reduce(mine)):
    failures.append("all_reduce")
  want = np.sum(np.stack(ref), axis=0).reshape(n, -1)
  if not all(np.array_equal(x, want[g]) for g, x in zip(mine_ranks, C.reduce_scatter(mine))):
    failures.append("reduce_scatter")
  want = [np.concatenate([ref[k].reshape(n, -1)[g] for k in range(n)]) for g in mine_ranks]
  if not all(np.array_equal(x, w) for x, w in zip(C.all_to_all(mine), want)):
    failures.append("all_to_all")
  got = C.collective_permute(mine, [(k, (k + 1) % n) for k in range(n)])
  if not all(np.array_equal(x, ref[(g - 1) % n]) for g, x in zip(mine_ranks, got)):
    failures.append("collective_permute")
  part = [x[:per // n] for x in mine]  # 64 MB gathered
  if not all(np.array_equal(x, np.stack([ref[k][:per // n] for k in range(n)])) for x in C.all_gather(part)):
    failures.append("all_gather")
  result(event="big_ops", failures=failures)

elif scenario == "out":
  # Results written into the caller's arrays (out=), against the same call
  # with fresh ones and against numpy; an all-reduce of one array in place
  # (out=x) on every size path: in the record, after the signature, chunked.
  failures = []
  for size in (7, 65536, 4 << 20):
    xs = [data(g, "float32", size) for g in mine_ranks]
    for op in ("sum", "max"):
      want = reduce_ref([data(k, "float32", size) for k in range(n)], op, "float32")
      outs = [np.full_like(x, np.nan) for x in xs]
      got = C.all_reduce(xs if D > 1 else xs[0], op, out=outs if D > 1 else outs[0])
      if not all(a is b for a, b in zip(got if D > 1 else [got], outs)):
        failures.append(f"all_reduce {op}[{size}] did not return out")
      if not all(same(o, want) for o in outs):
        failures.append(f"all_reduce {op}[{size}] into out")
      if D == 1:
        x = data(r, "float32", size)
        if C.all_reduce(x, op, out=x) is not x or not same(x, want):
          failures.append(f"all_reduce {op}[{size}] in place")
    block = size - size % n
    parts = [x[:block] for x in xs]
    for name, call in (("all_gather", lambda o: C.all_gather(parts, out=o)),
                       ("reduce_scatter", lambda o: C.reduce_scatter(parts, out=o)),
                       ("all_to_all", lambda o: C.all_to_all(parts, out=o)),
                       ("collective_permute", lambda o: C.collective_permute(parts, [(k, (k + 1) % n) for k in range(n)],
                                                                              out=o))):
      fresh = call(None)
      outs = [np.full_like(f, np.nan) for f in fresh]
      got = call(outs)
      if not (all(a is b for a, b in zip(got, outs)) and all(same(f, o) for f, o in zip(fresh, outs))):
        failures.append(f"{name}[{block}] into out")
  # Refused before anything is sent (every process makes the same mistake).
  x = np.ones(8, np.float32)
  bad = {"shape": np.empty(9, np.float32), "dtype": np.empty(8, np.float64),
         "strided": np.empty(16, np.float32)[::2], "read-only": np.empty(8, np.float32)}
  bad["read-only"].flags.writeable = False
  wide = np.ones(8 * n, np.float32)
  refused = {}
  for name, o in bad.items():
    try:
      C.all_reduce([x] * D if D > 1 else x, out=[o] * D if D > 1 else o)
      refused[name] = "accepted"
    except ValueError as e:
      refused[name] = str(e)
  try:
    C.all_gather(wide[:8], out=wide.reshape(n, 8)) if D == 1 else C.all_gather([wide[:8]] * D, out=[wide.reshape(n, 8)] * D)
    refused["overlap"] = "accepted"
  except ValueError as e:
    refused["overlap"] = str(e)
  C.barrier()
  result(event="out", failures=failures, refused=refused)

elif scenario.startswith("mismatch_"):
  deviant = r == 1
  t0 = time.monotonic()
  try:
    if scenario == "mismatch_shape":
      C.all_reduce(np.ones(7 if deviant else 8, np.float32))
    elif scenario == "mismatch_dtype":
      C.all_reduce(np.ones(8, np.float64 if deviant else np.float32))
    elif scenario == "mismatch_inline_vs_signed":  # 4 KB rides with the signature; 256 KB follows it
      C.all_reduce(np.ones(1024 if deviant else 65536, np.float32))
    elif scenario == "mismatch_signed_vs_ring":  # 256 KB follows the signature; 16 MB takes Gloo's ring
      C.all_reduce(np.ones(65536 if deviant else 4 << 20, np.float32))
    elif scenario == "mismatch_op":
      (C.all_gather if deviant else C.all_reduce)(np.ones(8, np.float32))
    elif scenario == "mismatch_order":
      if deviant:
        C.all_gather(np.ones(4, np.int32))
        C.all_reduce(np.ones(8, np.float32))
      else:
        C.all_reduce(np.ones(8, np.float32))
        C.all_gather(np.ones(4, np.int32))
    result(event="no_error")
  except RuntimeError as e:
    result(event="error", seconds=time.monotonic() - t0, **error_fields(e))

elif scenario == "last_batch":
  # Process 1 runs out of batches first and exits normally.
  batches = 3 if r == 1 else 6
  try:
    for i in range(batches):
      C.all_reduce(np.ones(1000, np.float32))
      time.sleep(0.2)
    result(event="finished", batches=batches)
  except RuntimeError as e:
    result(event="error", **error_fields(e))
    sys.exit(7)

elif scenario == "loop_big":
  x = np.ones(16 << 20, np.float32)
  try:
    C.all_reduce(x)  # the communicator (and its segment) exists when "looping" says so
    result(event="looping", os_pid=os.getpid())
    while True:
      C.all_reduce(x)
  except RuntimeError as e:
    result(event="error", **error_fields(e))
    time.sleep(30)

elif scenario == "left_behind":
  x = np.full(1 << 20, r + 1, np.float32)  # 4 MB: past what travels with the signatures
  try:
    C.collective_permute(x, [(1, 0), (0, 2)])
    result(event="permuted")
    C.all_reduce(x)
    result(event="done")
  except RuntimeError as e:
    result(event="error", **error_fields(e))
    time.sleep(30)

elif scenario == "long_call":
  x = np.full(int(sys.argv[2]) << 18, r + 1, np.float32)
  distributed.barrier("long_call")  # the small call below finds the others there
  C.all_reduce(x[:1024])  # connects the communicator outside the timed call
  t0 = time.monotonic()
  try:
    got = C.all_reduce(x)
    result(event="done", seconds=time.monotonic() - t0,
           equal=bool(np.all(got == np.float32(n_proc * (n_proc + 1) / 2))))
  except RuntimeError as e:
    result(event="done", seconds=time.monotonic() - t0, **error_fields(e))

else:
  raise SystemExit(f"unknown scenario {scenario}")

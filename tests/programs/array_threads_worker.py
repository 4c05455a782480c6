"""A process of a job whose arrays several threads touch at once while they
move between processes (tests/test_array_threads.py). Identity from
MYPLUGIN_*, one device per process; every loop is bounded by ROUNDS
(environment, default 200) and by SECONDS (default 60).

usage: python array_threads_worker.py SCENARIO
  readers      process 0 sends the same 64 KiB array 8 times a round to
               process 1 (a small array comes back each round, so sends end
               while the next round's begin) while a second thread reads it
               in every way a program can: np.asarray, np.from_dlpack,
               jax.dlpack.from_dlpack, __array__ and the buffer protocol
               (memoryview). RESULT "looping" after the first round, then
               "done" {rounds, reads, ok} or "error" (the peer killed)
  received     as readers, and on process 1 a second thread reads every
               array as it arrives (np.asarray, np.from_dlpack), while the
               next ones land
  two          3 processes: process 0 sends the same array to processes 1
               and 2 at once, 8 times a round, a reader thread as in readers
  deleted_view process 0 sends a zero-copy view of numpy memory
               (jax.dlpack.from_dlpack of a numpy array), deletes the view
               at once and exports another array with np.from_dlpack, every
               round (the view's last release runs numpy's deleter, which
               takes the GIL)
  donate       each round, process 0 sends a fresh array and at once
               deletes it, or donates it to a jitted x + 1, or does both to
               two arrays; the donated call's result and the bytes process 1
               gets are checked
  mix          a bounded random mix (MIX_SEED), the same draws on both
               processes: sends of arrays of random sizes from a pool in
               either direction, exports and reads on a second thread,
               deletes, donations, views of numpy memory; everything that
               arrives is checked
Every process ends with RESULT "done" (or "error" with the error's fields,
after which it exits 0 at once: its peer was killed by the test).
"""
import json
import os
import random
import sys
import threading
import time

from jax_plugin import distributed

distributed.initialize(heartbeat_timeout_seconds=float(os.environ.get("TEST_HEARTBEAT_TIMEOUT", "10")),
                       fate_sharing=False)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

from error_fields import error_fields  # noqa: E402

scenario = sys.argv[1]
me = jax.process_index()
n = jax.process_count()
dev = [SingleDeviceSharding(jax.local_devices(process_index=p)[0]) for p in range(n)]
ROUNDS = int(os.environ.get("ROUNDS", "200"))
SECONDS = float(os.environ.get("SECONDS", "60"))
PER_ROUND = 8
deadline = time.monotonic() + SECONDS


def result(**kv):
  print("RESULT " + json.dumps(kv), flush=True)


def on(p, value):
  """A committed array on process p's device (only p holds its data)."""
  value = np.asarray(value)
  return jax.make_array_from_callback(value.shape, dev[p], lambda idx: value[idx], dtype=value.dtype)


def placeholder(p, like):
  """What the processes other than p pass to device_put for p's array."""
  return jax.make_array_from_callback(like.shape, dev[p], lambda idx: np.zeros(like.shape, like.dtype)[idx],
                                      dtype=like.dtype)


def local(a):
  return a.addressable_shards[0].data


class Reader:
  """A thread that reads `target()` in every way it is told to, until
  stopped; counts its reads and any that differ from `expect()` or fail.
  A thread that deletes or donates an array first makes sure the reader is
  done with it (forget): deleting an array that another thread is reading
  is a race in jaxlib itself (jax's CPU backend aborts: "Non-zero type 1
  hold on destruction")."""

  def __init__(self, target, expect, ways):
    self.target, self.expect, self.ways = target, expect, ways
    self.reads = 0
    self.wrong = []
    self.lock = threading.Lock()  # held while one target is read
    self.stop = threading.Event()
    self.thread = threading.Thread(target=self.run, daemon=True)
    self.thread.start()

  def run(self):
    while not self.stop.is_set():
      with self.lock:
        a = self.target()
        if a is not None:
          want = self.expect(a)
          for way in self.ways:
            try:
              got = way(a)
            except Exception as e:  # noqa: BLE001
              self.wrong.append(f"{way.__name__}: {type(e).__name__}: {e}")
              continue
            self.reads += 1
            if not np.array_equal(got, want):
              self.wrong.append(f"{way.__name__}: values differ")
          del a
          continue
      time.sleep(0.0005)

  def forget(self):
    """Returns once a read of the target in progress has ended (the caller
    has already changed what target() answers)."""
    with self.lock:
      pass

  def end(self):
    self.stop.set()
    self.thread.join(timeout=30)
    return {"reads": self.reads, "wrong": self.wrong[:5]}


def as_array(a):
  return np.asarray(a)


def from_dlpack(a):
  return np.from_dlpack(a).copy()


def jax_from_dlpack(a):
  return np.asarray(jax.dlpack.from_dlpack(a))


def dunder_array(a):
  return a.__array__()


def buffer_protocol(a):
  view = memoryview(np.asarray(a))  # jaxlib's zero-copy numpy array, through the buffer protocol
  return np.frombuffer(view, dtype=a.dtype).reshape(a.shape)


EVERY_WAY = (as_array, from_dlpack, jax_from_dlpack, dunder_array, buffer_protocol)


def until_done(body):
  """Runs body(i) for each round while time is left; on an error, reports
  it and exits at once (the test killed the peer)."""
  rounds = 0
  try:
    for i in range(ROUNDS):
      if time.monotonic() > deadline:
        break
      body(i)
      rounds += 1
      if i == 0:
        result(event="looping")
  except Exception as e:  # noqa: BLE001
    result(event="error", rounds=rounds, **error_fields(e))
    sys.stdout.flush()
    os._exit(0)
  return rounds


def readers(two=False, read_received=False):
  x = np.arange(16384, dtype=np.float32)  # 64 KiB
  y = on(0, x) if me == 0 else placeholder(0, x)
  last = [None]
  reader = None
  if me == 0:
    reader = Reader(lambda: local(y), lambda a: x, EVERY_WAY)
  elif read_received:
    reader = Reader(lambda: last[0], lambda a: x, (as_array, from_dlpack))
  wrong = []
  targets = [1, 2] if two else [1]

  def round_(i):
    got = []
    for _ in range(PER_ROUND):
      for t in targets:
        z = jax.device_put(y, dev[t])
        if me == t:
          got.append(z)
          last[0] = local(z)
    ack = jax.device_put(on(1, np.float32([i])) if me == 1 else placeholder(1, np.zeros(1, np.float32)), dev[0])
    if me == 0:
      if float(np.asarray(local(ack))[0]) != i:
        wrong.append(f"round {i}: ack {np.asarray(local(ack))}")
    for z in got:
      if not np.array_equal(np.asarray(local(z)), x):
        wrong.append(f"round {i}: a received array differs")

  rounds = until_done(round_)
  r = reader.end() if reader else {"reads": 0, "wrong": []}
  wrong += r["wrong"]
  result(event="done", rounds=rounds, reads=r["reads"], ok=not wrong, wrong=wrong[:5])


def deleted_view():
  other = on(0, np.arange(1024, dtype=np.float32)) if me == 0 else None
  wrong = []
  exports = [0]

  def round_(i):
    x = np.full(4096, float(i), np.float32)  # 16 KiB, aligned by numpy
    if me == 0:
      view = jax.device_put(jax.dlpack.from_dlpack(x), dev[0])
      z = jax.device_put(view, dev[1])
      view.delete()
      del view
      e = np.from_dlpack(local(other))
      exports[0] += 1
      if not np.array_equal(e, np.arange(1024, dtype=np.float32)):
        wrong.append(f"round {i}: the export differs")
      del x
    else:
      z = jax.device_put(placeholder(0, x), dev[1])
      if not np.array_equal(np.asarray(local(z)), x):
        wrong.append(f"round {i}: the array received differs")

  rounds = until_done(round_)
  result(event="done", rounds=rounds, reads=exports[0], ok=not wrong, wrong=wrong[:5])


def donate():
  plus_one = jax.jit(lambda a: a + 1, donate_argnums=0)
  wrong = []

  def round_(i):
    x = np.arange(8192, dtype=np.float32) + i
    y = on(0, x) if me == 0 else placeholder(0, x)
    z = jax.device_put(y, dev[1])
    if me == 0:
      if i % 3 == 0:
        y.delete()
      elif i % 3 == 1:
        w = plus_one(y)
        if not np.array_equal(np.asarray(local(w)), x + 1):
          wrong.append(f"round {i}: the donated call's result differs")
      else:
        w = plus_one(y)
        y2 = on(0, x * 2)
        z2 = jax.device_put(y2, dev[1])
        y2.delete()
        del z2
        if not np.array_equal(np.asarray(local(w)), x + 1):
          wrong.append(f"round {i}: the donated call's result differs")
    else:
      if not np.array_equal(np.asarray(local(z)), x):
        wrong.append(f"round {i}: the array received differs")
      if i % 3 == 2:
        z2 = jax.device_put(placeholder(0, x), dev[1])
        if not np.array_equal(np.asarray(local(z2)), x * 2):
          wrong.append(f"round {i}: the second array received differs")
    if i % 10 == 9:
      distributed.barrier(f"donate-{i}", timeout=60)

  rounds = until_done(round_)
  result(event="done", rounds=rounds, ok=not wrong, wrong=wrong[:5])


def mix():
  rng = random.Random(int(os.environ.get("MIX_SEED", "1")))  # the same draws on every process
  plus_one = jax.jit(lambda a: a + 1, donate_argnums=0)
  pool = {}  # name -> (owner, numpy value, array on the owner or a placeholder)
  arrived = []  # arrays received here, with what they must hold
  shared = {"target": None, "value": None}
  reader = Reader(lambda: shared["target"], lambda a: shared["value"], (as_array, from_dlpack, dunder_array))
  wrong = []
  counts = {}

  def fresh(name, owner):
    size = rng.choice([1, 7, 1024, 16384, 262144])
    value = (np.arange(size, dtype=np.float32) * rng.random()).astype(np.float32)
    view = rng.random() < 0.3  # drawn on every process: the draws stay the same
    if me == owner and view:
      a = jax.device_put(jax.dlpack.from_dlpack(value.copy()), dev[owner])  # a view of numpy memory
    else:
      a = on(owner, value) if me == owner else placeholder(owner, value)
    pool[name] = (owner, value, a)

  def step(i):
    op = rng.choice(["new", "send", "send", "send", "read", "delete", "donate", "check"])
    counts[op] = counts.get(op, 0) + 1
    if op == "new" or not pool:
      fresh(f"a{i}", rng.randrange(n))
      return
    name = rng.choice(sorted(pool))
    owner, value, a = pool[name]
    if op == "send":
      to = rng.choice([p for p in range(n) if p != owner])
      z = jax.device_put(a, dev[to])
      if me == to:
        arrived.append((z, value))
      if rng.random() < 0.5:  # the next sends of this array share its reads
        shared["target"] = None
        reader.forget()
        shared["value"], shared["target"] = value, (local(a) if me == owner else None)
    elif op == "read" and me == owner:
      e = np.from_dlpack(local(a))
      if not np.array_equal(e, value):
        wrong.append(f"step {i}: an export differs")
    elif op in ("delete", "donate"):
      del pool[name]
      if me == owner:
        if shared["value"] is value:
          shared["target"] = None
          reader.forget()
        if op == "delete":
          a.delete()
        else:
          w = plus_one(a)
          if not np.array_equal(np.asarray(local(w)), value + 1):
            wrong.append(f"step {i}: a donated call's result differs")
    elif op == "check":
      for z, v in arrived:
        if not np.array_equal(np.asarray(local(z)), v):
          wrong.append(f"step {i}: an array received differs")
      arrived.clear()
      distributed.barrier(f"mix-{i}", timeout=60)

  def round_(i):
    for j in range(PER_ROUND):
      step(i * PER_ROUND + j)

  rounds = until_done(round_)
  for z, v in arrived:
    if not np.array_equal(np.asarray(local(z)), v):
      wrong.append("an array received differs")
  r = reader.end()
  wrong += r["wrong"]
  result(event="done", rounds=rounds, reads=r["reads"], ops=counts, ok=not wrong, wrong=wrong[:5])


if scenario == "readers":
  readers()
elif scenario == "received":
  readers(read_received=True)
elif scenario == "two":
  readers(two=True)
elif scenario == "deleted_view":
  deleted_view()
elif scenario == "donate":
  donate()
elif scenario == "mix":
  mix()
else:
  sys.exit(f"unknown scenario {scenario}")
try:
  distributed.barrier("done", timeout=120)
except Exception as e:  # noqa: BLE001  (a peer killed by the test after this process was done)
  result(event="error", rounds=-1, **error_fields(e))
  sys.stdout.flush()
  os._exit(0)
distributed.shutdown()

"""A process of a cross-host transfer test job (2 processes, identity from
MYPLUGIN_*, one device each): jax.device_put between the two processes.

usage: python transfer_worker.py SCENARIO
  big          one 300 MiB float32 array from process 0 to 1 (more than the
               old path's 256 MiB limit); each process samples its resident
               memory while it moves: RESULT {"event": "big", "ok", "before_mib", "peak_mib"}
  ping_pong    until an error: an array of 16 MiB to process 1, a small one back
               (so each round waits for the other side); RESULT "looping" after
               the first round with this process's open descriptors and
               /dev/shm entries, then "error" with the error's fields, the
               seconds since the last round began, and the descriptors then
  mismatch     process 0 sends f32[8], process 1 expects f32[4] (their
               programs differ): "error" on process 1
  late_sender  process 0 sends only after process 1 gave up (arrival bound
               from MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS): "error" on process 1;
               process 0 then waits for a small array back, which never comes
  then_collective
               process 0 sends 48 MiB to process 1 and goes straight on to a
               sum over every device of the job (a collective); process 1
               joins the sum only once it holds the array (any number of
               devices): RESULT {"event": "then_collective", "array_ok", "sum_ok"}
  deleted      process 0 sends 48 MiB to process 1, deletes the array at
               once and fills new arrays of its size (which may reuse its
               memory): RESULT {"event": "deleted", "ok"} on process 1
  donated      process 0 sends 48 MiB to process 1, which posts its receive
               2 s late, and at once passes the array, donated, to a jitted
               x + 1: RESULT {"event": "donated", "ok"} on each (the
               result on process 0, the bytes sent on process 1)
"""
import json
import os
import sys
import threading
import time

from jax_plugin import distributed

distributed.initialize(heartbeat_timeout_seconds=float(os.environ.get("TEST_HEARTBEAT_TIMEOUT", "5")),
                       fate_sharing=False)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

from error_fields import error_fields  # noqa: E402

scenario = sys.argv[1]
me = jax.process_index()
dev = [SingleDeviceSharding(jax.local_devices(process_index=p)[0]) for p in (0, 1)]


def result(**kv):
  print("RESULT " + json.dumps(kv), flush=True)


def rss_mib():
  with open("/proc/self/status") as f:
    return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def sockets():
  """This process's open sockets (the coordination connection, endpoints)."""
  n = 0
  for fd in os.listdir("/proc/self/fd"):
    try:
      n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
      pass
  return n


def shm():
  return sorted(os.listdir("/dev/shm"))


def rings():
  """The transfer rings this process maps (transfers between processes of one host)."""
  with open("/proc/self/maps") as f:
    return len({line.split()[0] for line in f if "memfd:myplugin-transfer-ring" in line})


def on(p, value):
  """A committed array on process p's device (only p holds its data)."""
  value = np.asarray(value)
  return jax.make_array_from_callback(value.shape, dev[p], lambda idx: value[idx], dtype=value.dtype)


def on_shape(p, shape, dtype, fill):
  return jax.make_array_from_callback(shape, dev[p], lambda idx: np.full(shape, fill, dtype)[idx], dtype=dtype)


if scenario == "big":
  n = (300 << 20) // 4
  y = on_shape(0, (n,), np.float32, 2.5)
  time.sleep(0.5)
  before = rss_mib()
  peak = [before]
  done = threading.Event()

  def sample():
    while not done.is_set():
      peak[0] = max(peak[0], rss_mib())
      time.sleep(0.002)

  t = threading.Thread(target=sample, daemon=True)
  t.start()
  z = jax.device_put(y, dev[1])
  if me == 1:
    z.block_until_ready()
  # The sender's bytes have left once process 1 has them all.
  distributed.barrier("big-done", timeout=120)
  done.set()
  t.join()
  ok = True
  if me == 1:
    data = np.asarray(z.addressable_shards[0].data)
    ok = data.shape == (n,) and bool((data == 2.5).all())
  result(event="big", ok=ok, before_mib=before, peak_mib=peak[0], rings=rings())
elif scenario == "ping_pong":
  x = np.arange((16 << 20) // 4, dtype=np.float32)
  y = on(0, x) if me == 0 else on_shape(0, x.shape, np.float32, 0)
  round_start = time.monotonic()
  try:
    for i in range(1000000):
      round_start = time.monotonic()
      z = jax.device_put(y, dev[1])
      back = jax.device_put(on(1, np.float32([i])) if me == 1 else on_shape(1, (1,), np.float32, 0), dev[0])
      if me == 0:
        assert float(np.asarray(back.addressable_shards[0].data)[0]) == i
      else:
        assert np.array_equal(np.asarray(z.addressable_shards[0].data), x)
      if i == 0:
        result(event="looping", sockets=sockets(), shm=shm(), rings=rings())
  except Exception as e:  # noqa: BLE001
    waited = time.monotonic() - round_start
    time.sleep(1.5)  # connections closed by the failure are let go within moments
    result(event="error", waited=waited, sockets=sockets(), shm=shm(), rings=rings(), **error_fields(e))
    sys.stdout.flush()
    os._exit(0)
elif scenario == "mismatch":
  y = on(0, np.arange(8, dtype=np.float32)) if me == 0 else on_shape(0, (4,), np.float32, 0)
  try:
    z = jax.device_put(y, dev[1])
    if me == 1:
      z.block_until_ready()
      result(event="received", value=np.asarray(z.addressable_shards[0].data).tolist())
    else:
      time.sleep(5)  # the receiver's refusal reaches this process's sender thread meanwhile
  except Exception as e:  # noqa: BLE001
    result(event="error", **error_fields(e))
  time.sleep(3)  # the sender's thread hears the refusal meanwhile, and logs it
  os._exit(0)
elif scenario == "late_sender":
  timeout = float(os.environ["MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS"])
  if me == 0:
    time.sleep(timeout + 2)
  t0 = time.monotonic()
  y = on(0, np.arange(8, dtype=np.float32)) if me == 0 else on_shape(0, (8,), np.float32, 0)
  try:
    z = jax.device_put(y, dev[1])
    if me == 1:
      z.block_until_ready()
      result(event="received")
    else:
      time.sleep(5)
  except Exception as e:  # noqa: BLE001
    result(event="error", waited=time.monotonic() - t0, **error_fields(e))
  time.sleep(timeout + 2 if me == 1 else 0)  # alive when the late sender comes
  os._exit(0)
elif scenario == "then_collective":
  import jax.numpy as jnp
  from jax.sharding import NamedSharding, PartitionSpec as P
  x = np.arange((48 << 20) // 4, dtype=np.float32)
  y = on(0, x) if me == 0 else on_shape(0, x.shape, np.float32, 0)
  mesh = jax.make_mesh((jax.device_count(),), ("d",))
  rows = np.arange(jax.device_count() * 4, dtype=np.float32).reshape(jax.device_count(), 4)
  total = jax.jit(lambda r: jnp.sum(r, axis=0), out_shardings=NamedSharding(mesh, P()))
  g = jax.make_array_from_callback(rows.shape, NamedSharding(mesh, P("d")), lambda i: rows[i])
  z = jax.device_put(y, dev[1])
  array_ok = True
  if me == 1:
    array_ok = bool(np.array_equal(np.asarray(z.addressable_shards[0].data), x))
  s = total(g)  # process 0 is here while its send is still under way
  sum_ok = all(np.array_equal(np.asarray(sh.data), rows.sum(axis=0)) for sh in s.addressable_shards)
  result(event="then_collective", array_ok=array_ok, sum_ok=sum_ok)
elif scenario == "deleted":
  x = np.arange((48 << 20) // 4, dtype=np.float32)
  y = on(0, x) if me == 0 else on_shape(0, x.shape, np.float32, 0)
  z = jax.device_put(y, dev[1])
  if me == 0:
    y.delete()
    others = [on(0, np.full(x.shape, -i, np.float32)) for i in range(1, 4)]
    jax.block_until_ready(others)
  else:
    result(event="deleted", ok=bool(np.array_equal(np.asarray(z.addressable_shards[0].data), x)))
  distributed.barrier("deleted-done", timeout=120)
elif scenario == "donated":
  x = np.arange((48 << 20) // 4, dtype=np.float32)
  y = on(0, x) if me == 0 else on_shape(0, x.shape, np.float32, 0)
  plus_one = jax.jit(lambda a: a + 1, donate_argnums=0)
  if me == 1:
    time.sleep(2)  # the send waits for this receive meanwhile
  z = jax.device_put(y, dev[1])
  if me == 0:
    w = plus_one(y)
    result(event="donated", ok=bool(np.array_equal(np.asarray(w.addressable_shards[0].data), x + 1)))
  else:
    result(event="donated", ok=bool(np.array_equal(np.asarray(z.addressable_shards[0].data), x)))
  distributed.barrier("donated-done", timeout=120)
else:
  sys.exit(f"unknown scenario {scenario}")
distributed.shutdown()

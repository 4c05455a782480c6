"""A process of a multi-process job in which something goes wrong around a
psum inside a pmap (a jitted program over every process's devices).

usage: straggler_worker.py MODE [SECONDS] [LAGGARD] [BARRIER_TIMEOUT]
  sleep       the last process (or LAGGARD) sleeps in time.sleep before the second psum
  busy        the last process spins in a Python loop instead
  gil         the last process sleeps in a C call that holds the GIL
  compile     every process compiles a new program for the second psum; the
              last one's compile takes SECONDS longer (a test-only hook)
  barrier     two full barriers, then process 0 and the last process meet in a
              barrier of theirs alone (jax's client, process_ids=...), which
              the last one reaches SECONDS late; BARRIER_TIMEOUT bounds it
  mismatch    process 1 issues an all-gather where the others issue the psum (call #2)
  early_exit  process 1 leaves its loop after 3 steps, the others run 5
  sigkill     the last process kills itself with SIGKILL before call #2
  many        40 psums, then every process writes its flight recorder on request
  named       a psum in a pmap and one in a jitted shard_map, then the same dump
"""
import ctypes
import json
import os
import signal
import sys
import threading
import time

import jax
import numpy as np

mode = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
r = jax.process_index()
n = jax.process_count()
local = jax.local_device_count()
laggard = int(sys.argv[3]) if len(sys.argv) > 3 else n - 1
barrier_timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0


def event(name, **fields):
  print("RESULT " + json.dumps({"event": name, "time": time.time(), **fields}), flush=True)


def spin(s):
  end = time.monotonic() + s
  while time.monotonic() < end:  # BUSY_LINE
    pass


def loader(ready):
  ready.wait()  # LOADER_LINE: a second Python thread, which every report must show too


def psum_step(v):
  return jax.lax.psum(v, "i")


def psum_again_step(v):
  return jax.lax.psum(v, "i")


def gather_step(v):
  return jax.lax.all_gather(v, "i")


def module_name(lowered):
  """jax's own name for a program (the flight recorder's reference)."""
  return lowered.as_text().split("module @", 1)[1].split()[0]


threading.Thread(target=loader, args=(threading.Event(),), daemon=True, name="loader").start()
psum = jax.pmap(psum_step, axis_name="i")
gather = jax.pmap(gather_step, axis_name="i")
x = np.full((local, 4), r + 1, np.float32)
total = float(local * sum(range(1, n + 1)))
event("programs", psum=module_name(psum.lower(x)), gather=module_name(gather.lower(x)))

try:
  if mode in ("sleep", "busy", "gil"):
    assert float(np.asarray(psum(x))[0, 0]) == total  # call #0: compile and connect
    event("warm", function=module_name(psum.lower(x)))
    if r == laggard:
      if mode == "sleep":
        time.sleep(seconds)  # SLEEP_LINE
      elif mode == "busy":
        spin(seconds)
      else:
        ctypes.PyDLL(None).sleep(int(seconds))  # GIL_LINE
    else:
      event("waiting")
    out = float(np.asarray(psum(x))[0, 0])
    event("done", value=out, expected=total)
  elif mode == "compile":
    assert float(np.asarray(psum(x))[0, 0]) == total  # call #0: compile and connect
    again = jax.pmap(psum_again_step, axis_name="i")  # a new program: every process compiles it
    event("warm", function=module_name(again.lower(x)))
    if r == laggard:
      from jax_plugin import _myplugin
      from jax_plugin.spmd import compile_hooks

      def slow_local_program(*args):
        time.sleep(seconds)  # COMPILE_HOOK_LINE: a test-only hook, inside this process's compile
        return compile_hooks.local_program(*args)

      _myplugin.set_program_hooks(compile_hooks.shadow_program, slow_local_program,
                                  compile_hooks.UnsupportedProgram)
    else:
      event("waiting")
    out = float(np.asarray(again(x))[0, 0])  # COMPILE_LINE
    event("done", value=out, expected=total)
  elif mode == "barrier":
    from jax._src import distributed as jax_distributed
    client = jax_distributed.global_state.client
    assert float(np.asarray(psum(x))[0, 0]) == total
    client.wait_at_barrier("all", 60000)  # uses #0 and #1 of a barrier of every process
    client.wait_at_barrier("all", 60000)
    if r in (0, laggard):
      if r == laggard:
        time.sleep(seconds)  # BARRIER_SLEEP_LINE
      else:
        event("waiting")
      client.wait_at_barrier("pair", int(barrier_timeout * 1000), process_ids=[0, laggard])
    else:
      time.sleep(seconds)
    event("done", value=total, expected=total)
  elif mode == "named":
    from jax.sharding import NamedSharding, PartitionSpec as P
    try:
      from jax import shard_map
    except ImportError:  # older jax
      from jax.experimental.shard_map import shard_map
    mesh = jax.make_mesh((n * local,), ("d",))

    def train_step(v):
      return jax.lax.psum(v, "d")

    step = jax.jit(shard_map(train_step, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    sharding = NamedSharding(mesh, P("d"))
    g = jax.make_array_from_process_local_data(sharding, np.full((local, 4), r + 1, np.float32))
    assert float(np.asarray(psum(x))[0, 0]) == total
    assert float(np.asarray(step(g).addressable_shards[0].data)[0, 0]) == total
    from jax_plugin import straggler
    event("names", pmap=module_name(psum.lower(x)), jit=module_name(step.lower(g)))
    event("dumped", folder=straggler.dump_flight_recorder())
  elif mode == "mismatch":
    for step in range(4):
      if step == 2 and r == 1:
        gather(x).block_until_ready()
      else:
        psum(x).block_until_ready()
  elif mode == "early_exit":
    for step in range(5 if r != 1 else 3):
      psum(x).block_until_ready()
  elif mode == "sigkill":
    for step in range(4):
      if step == 2 and r == laggard:
        os.kill(os.getpid(), signal.SIGKILL)
      psum(x).block_until_ready()
  elif mode == "many":
    for step in range(40):
      psum(x).block_until_ready()
    from jax_plugin import straggler
    event("dumped", folder=straggler.dump_flight_recorder())
  event("finished")
except Exception as e:
  event("error", error=str(e))
  raise

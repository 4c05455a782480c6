"""A process of a coordination test job. Its identity comes from the
MYPLUGIN_* variables; the scenario from argv[1]. It prints RESULT lines
that the tests read.

usage: python coord_worker.py SCENARIO [ARG] [MORE]
"""
import json
import os
import sys
import time

from jax_plugin import distributed
from error_fields import error_fields

scenario = sys.argv[1]
arg = sys.argv[2] if len(sys.argv) > 2 else None
pid = int(os.environ["MYPLUGIN_PROCESS_ID"])
n = int(os.environ["MYPLUGIN_NUM_PROCESSES"])


def result(**kv):
  print("RESULT " + json.dumps(kv), flush=True)


if scenario == "never_start" and pid == int(arg):
  time.sleep(3600)

t0 = time.monotonic()
try:
  distributed.initialize(
      heartbeat_timeout_seconds=float(os.environ.get("TEST_HEARTBEAT_TIMEOUT", "3")),
      initialization_timeout=float(os.environ.get("TEST_INIT_TIMEOUT", "60")))
except Exception as e:
  result(event="init_error", error=str(e))
  sys.exit(3)
result(event="registered", seconds=time.monotonic() - t0, topology=distributed.global_topology())

if scenario == "kv_barrier":
  distributed.key_value_set(f"proc/{pid}", f"value-{pid}")
  distributed.key_value_set(b"bin/\x00\xff" + bytes([pid]), bytes(range(256)))
  got = distributed.key_value_get(f"proc/{(pid + 1) % n}", timeout=30).decode()
  distributed.barrier("all-set", timeout=30)
  listed = sorted(k.decode() for k, _ in distributed.key_value_list("proc/"))
  binary = distributed.key_value_get(b"bin/\x00\xff" + bytes([(pid + 1) % n]), timeout=30)
  missing = distributed.key_value_try_get("no/such/key")
  try:
    distributed.key_value_get("never/set", timeout=0.5)
    timeout_error = None
  except RuntimeError as e:
    timeout_error = str(e)
  distributed.barrier("read", timeout=30)
  if pid == 0:
    distributed.key_value_delete("proc/0")
  distributed.barrier("deleted", timeout=30)
  after_delete = distributed.key_value_try_get("proc/0")
  for i in range(20):
    distributed.barrier(f"round-{i % 3}", timeout=30)
  result(event="done", got=got, listed=listed, binary_ok=binary == bytes(range(256)), missing=missing,
         timeout_error=timeout_error, after_delete=after_delete)
  distributed.shutdown()
  result(event="shutdown")

elif scenario == "loop":
  # Barriers until something goes wrong; the test kills or stops a process.
  result(event="looping", os_pid=os.getpid())
  try:
    i = 0
    while True:
      distributed.barrier(f"loop-{i % 2}", timeout=600)
      i += 1
      time.sleep(0.01)
  except RuntimeError as e:
    result(event="error", **error_fields(e))
    time.sleep(30)  # fate-sharing ends the process before this

elif scenario == "exit_early":
  victim = int(arg)
  if pid == victim:
    time.sleep(0.5)
    os._exit(0)  # no shutdown
  try:
    while True:
      distributed.barrier("spin", timeout=600)
  except RuntimeError as e:
    result(event="error", **error_fields(e))
    time.sleep(30)

elif scenario == "barrier_missing":
  # ARG: the absent process; argv[3] (default 0): seconds it stays at least.
  absent = int(arg)
  if pid == absent:
    # Never arrives in time, but stays alive: until the others' barrier
    # timed out (they meet it in a barrier of their own afterwards).
    hold_until = time.monotonic() + (float(sys.argv[3]) if len(sys.argv) > 3 else 0)
    distributed.barrier("b-over", timeout=60)
    time.sleep(max(0.0, hold_until - time.monotonic()))
    distributed.shutdown(timeout=30)
  else:
    try:
      distributed.barrier("b", timeout=2)
      result(event="barrier_passed")
    except RuntimeError as e:
      result(event="barrier_error", **error_fields(e))
    distributed.barrier("b-over", timeout=60)
    distributed.shutdown(timeout=30)
  result(event="shutdown")

elif scenario == "finish_early":
  # One process finishes (orderly shutdown) while the others still wait for it.
  early = int(arg)
  if pid == early:
    distributed.shutdown(timeout=30)
    result(event="shutdown")
  else:
    try:
      distributed.barrier("work", timeout=60)
      result(event="barrier_passed")
    except RuntimeError as e:
      result(event="barrier_error", **error_fields(e))
      sys.exit(5)

elif scenario == "slow_reader":
  # The last process waits for large values and is stopped (SIGSTOP) by the
  # test; once the flag file exists, process 0 sets them and the others
  # time their own calls while the service holds the values for the stopped
  # reader. 3 x 30 MiB: more than the kernel's socket buffers take (the
  # receive buffer alone may grow to 32 MiB), so the service's writer stalls.
  import threading
  flag = arg
  victim = n - 1
  if pid == victim:
    for i in range(3):
      threading.Thread(target=distributed.key_value_get, args=(f"big/{i}", 600), daemon=True).start()
    time.sleep(0.5)
    result(event="waiting")
    time.sleep(600)
  while not os.path.exists(flag):
    time.sleep(0.01)
  began = time.monotonic()
  if pid == 0:
    for i in range(3):
      distributed.key_value_set(f"big/{i}", b"x" * (30 << 20))
  latencies = []
  error = None
  start = time.monotonic()
  try:
    i = 0
    while time.monotonic() - start < 20:
      t = time.monotonic()
      distributed.key_value_set(f"small/{pid}/{i}", b"v")
      distributed.key_value_get(f"small/{pid}/{i}", timeout=10)
      latencies.append(time.monotonic() - t)
      i += 1
      time.sleep(0.02)
  except RuntimeError as e:
    error = str(e)
  result(event="latencies", max=max(latencies) if latencies else None, count=len(latencies),
         error=error, seconds=time.monotonic() - began)
  time.sleep(30)  # fate-sharing ends the process

elif scenario == "kv_limits":
  # Each limit gives the caller a clear error, and the job goes on.
  errors = {}
  def attempt(name, fn):
    try:
      fn()
      errors[name] = None
    except RuntimeError as e:
      errors[name] = str(e)
  mib = 1 << 20
  attempt("value", lambda: distributed.key_value_set("k", b"x" * (80 * mib)))
  attempt("key", lambda: distributed.key_value_set("k" * 5000, b"v"))
  for i in range(3):
    distributed.key_value_set(f"big/{i}", b"x" * (30 * mib))
  attempt("list", lambda: distributed.key_value_list("big/"))
  one = distributed.key_value_list("big/1")
  stored = 3
  try:
    for i in range(3, 20):
      distributed.key_value_set(f"big/{i}", b"x" * (30 * mib))
      stored += 1
    errors["store"] = None
  except RuntimeError as e:
    errors["store"] = str(e)
  distributed.key_value_set("after", "still works")
  after = distributed.key_value_get("after", timeout=10).decode()
  distributed.barrier("end", timeout=30)
  result(event="kv_limits", errors=errors, listed_one=[k.decode() for k, _ in one], stored=stored, after=after)
  distributed.shutdown()
  result(event="shutdown")

elif scenario == "never_start":
  result(event="unexpected")

else:
  raise SystemExit(f"unknown scenario {scenario}")

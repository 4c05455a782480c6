"""Bad input to the coordination service: each gets a clear error, and the
service keeps serving the others."""
import os
import select
import socket
import struct
import subprocess
import sys

import pytest

from jax_plugin import _myplugin
from job import Job, free_port
from proc import child_env, kill_group, run_python

TOKEN = "s3cret"
MAGIC = 0x4D59504C


def frame(payload: bytes) -> bytes:
  return struct.pack("<I", len(payload)) + payload


def hello(token=TOKEN, version=_myplugin.PROTOCOL_VERSION, pid=0, magic=MAGIC) -> bytes:
  t = token.encode()
  return frame(struct.pack("<BIIH", 1, 0, magic, version) + struct.pack("<I", len(t)) + t +
               struct.pack("<I", pid))


def recv_reply(sock) -> tuple[int, str]:
  """(type, message) of the reply; message only for errors. The service's
  heartbeats (type 16) and peer-shutdown notices (type 19), which a member
  receives at any time, are not replies and are skipped."""
  sock.settimeout(10)
  while True:
    head = b""
    while len(head) < 4:
      chunk = sock.recv(4 - len(head))
      if not chunk:
        return (0, "closed")
      head += chunk
    (n,) = struct.unpack("<I", head)
    body = b""
    while len(body) < n:
      body += sock.recv(n - len(body))
    kind = body[0]
    if kind in (16, 19):
      continue
    if kind == 3:  # Error: code, message
      (code, mlen) = struct.unpack("<II", body[5:13])
      return (kind, body[13:13 + mlen].decode())
    return (kind, "")


@pytest.fixture
def service():
  s = _myplugin.CoordinationService.start("127.0.0.1", 0, 2, TOKEN, 5.0, 60.0)
  yield s
  s.stop()


def connect(service):
  return socket.create_connection(("127.0.0.1", service.port), timeout=10)


def test_wrong_token(service):
  with connect(service) as s:
    s.sendall(hello(token="guess"))
    kind, msg = recv_reply(s)
    assert kind == 3 and "wrong coordination token" in msg


def test_garbage_bytes(service):
  with connect(service) as s:
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    kind, msg = recv_reply(s)
    assert kind == 3 and ("exceeds the limit" in msg or "not a myplugin coordination client" in msg)


def test_oversized_length_prefix(service):
  # Before the Hello, the cap is the Hello's; after it, the frame limit.
  with connect(service) as s:
    s.sendall(struct.pack("<I", 0xFFFFFFF0) + b"x" * 16)
    kind, msg = recv_reply(s)
    assert kind == 3 and "exceeds the limit of 65536 bytes" in msg
  with connect(service) as s:
    s.sendall(hello())
    assert recv_reply(s)[0] == 2
    s.sendall(struct.pack("<I", 0xFFFFFFF0) + b"x" * 16)
    assert recv_reply(s) == (0, "closed")
  # The member that sent it is failed, with the reason.
  assert service.failure() is not None and "exceeds the limit of 67108864 bytes" in service.failure()


def test_other_protocol_version(service):
  with connect(service) as s:
    s.sendall(hello(version=99))
    kind, msg = recv_reply(s)
    assert kind == 3 and "protocol version mismatch: the client speaks version 99" in msg


def test_process_id_out_of_range(service):
  with connect(service) as s:
    s.sendall(hello(pid=7))
    kind, msg = recv_reply(s)
    assert kind == 3 and "process id 7 is out of range for a job of 2 processes" in msg


def test_duplicate_process_id(service):
  with connect(service) as first, connect(service) as second:
    first.sendall(hello(pid=1))
    assert recv_reply(first)[0] == 2  # HelloOk
    second.sendall(hello(pid=1))
    kind, msg = recv_reply(second)
    assert kind == 3 and "process id 1 is already taken" in msg


def test_service_still_serves_after_bad_input(service):
  # Everything above, then a real job on the same service.
  for bad in (hello(token="nope"), b"\x00" * 3, struct.pack("<I", 1 << 31),
              hello(version=_myplugin.PROTOCOL_VERSION + 1)):
    with connect(service) as s:
      s.sendall(bad)
      s.shutdown(socket.SHUT_WR)
  job = Job(2, ["kv_barrier"], env={"MYPLUGIN_COORDINATOR_STANDALONE": "1", "MYPLUGIN_COORDINATOR_TOKEN": TOKEN,
                                    "MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{service.port}"})
  with job:
    assert job.wait(timeout=90) == {0: 0, 1: 0}, job.all_output()
  assert service.failure() is None
  assert service.all_departed()


def test_client_with_wrong_token_gets_a_clear_error(service):
  job = Job(1, ["kv_barrier"], env={"MYPLUGIN_COORDINATOR_STANDALONE": "1", "MYPLUGIN_COORDINATOR_TOKEN": "wrong",
                                    "MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{service.port}",
                                    "MYPLUGIN_NUM_PROCESSES": "2"})
  with job:
    job.wait(timeout=60)
    err = job.event(0, "init_error")
    assert err and "refused process 0: wrong coordination token" in err["error"], job.all_output()


def test_port_already_in_use():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    with pytest.raises(RuntimeError, match=f"ALREADY_EXISTS: .*127.0.0.1:{port} is already in use"):
      _myplugin.CoordinationService.start("127.0.0.1", port, 2, TOKEN, 5.0, 60.0)


def test_unreachable_coordinator_is_named_after_the_timeout():
  port = free_port()  # nothing listens there
  job = Job(1, ["kv_barrier"], env={"MYPLUGIN_COORDINATOR_STANDALONE": "1", "TEST_INIT_TIMEOUT": "2",
                                    "MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "MYPLUGIN_NUM_PROCESSES": "2"})
  with job:
    job.wait(timeout=60)
    err = job.event(0, "init_error")
    assert err and f"cannot reach the myplugin coordinator at 127.0.0.1:{port} within 2 s" in err["error"], \
        job.all_output()


def test_non_loopback_address_without_token_is_refused():
  code = "from jax_plugin import distributed as d\ntry:\n  d.initialize('192.0.2.1:1234', 2, 1)\nexcept ValueError as e:\n  print('ERR', e)"
  r = run_python(["-c", code], child_env(), timeout=60)
  assert "ERR" in r.stdout and "MYPLUGIN_COORDINATOR_TOKEN" in r.stdout, r.output


def test_initialize_twice_and_after_backend():
  code = """
import os, jax
from jax_plugin import distributed as d
d.initialize('127.0.0.1:%d', 1, 0)
try:
  d.initialize('127.0.0.1:%d', 1, 0)
except RuntimeError as e:
  print('TWICE', e)
d.shutdown()
jax.devices()
try:
  d.initialize('127.0.0.1:%d', 1, 0)
except RuntimeError as e:
  print('AFTER', e)
""" % ((free_port(),) * 3)
  r = run_python(["-c", code], child_env(JAX_PLATFORMS="myplugin"), timeout=60)
  assert "TWICE jax_plugin.distributed.initialize should only be called once" in r.stdout, r.output
  assert "AFTER" in r.stdout and "before any JAX computation" in r.stdout, r.output


def test_failure_reason_that_is_not_utf8(service):
  # An authenticated peer reports a failure whose reason is not UTF-8: the
  # service's failure() escapes the bytes instead of raising UnicodeDecodeError.
  reason = b"\xff\xfe bad \xc3\x28 ok \xc3\xa9"
  with connect(service) as s:
    s.sendall(hello())
    assert recv_reply(s)[0] == 2  # HelloOk
    s.sendall(frame(struct.pack("<BI", 18, 7) + struct.pack("<I", len(reason)) + reason +
                   struct.pack("<I", 0)))  # ReportError, blaming no other process
    deadline = __import__("time").monotonic() + 10
    while service.failure() is None and __import__("time").monotonic() < deadline:
      __import__("time").sleep(0.05)
  failure = service.failure()
  assert failure is not None and "\\xff\\xfe bad \\xc3( ok \u00e9" in failure, failure


def test_peer_bytes_in_errors_and_saturated_timeouts():
  # A key that is not UTF-8 in a timed-out get is named with escapes (the
  # error is the timeout, not a UnicodeDecodeError); timeouts of 2^63 ms (and
  # beyond what the clocks hold) wait instead of expiring at once.
  code = """
import threading, time
from jax_plugin import distributed as d
d.initialize('127.0.0.1:%d', 1, 0)
try:
  d.key_value_get(b"\\xff\\xfe-key", timeout=0.2)
except RuntimeError as e:
  print('MISSING', e)
threading.Timer(1.0, lambda: d.key_value_set('later', 'v')).start()
t = time.monotonic()
print('HUGE', d.key_value_get('later', timeout=2.0**63 / 1000), round(time.monotonic() - t) >= 1)
threading.Timer(1.0, lambda: d.key_value_set('later2', 'w')).start()
print('HUGER', d.key_value_get('later2', timeout=1e300))
d.barrier('b', timeout=2.0**63 / 1000)
print('BARRIER ok')
d.shutdown()
""" % free_port()
  r = run_python(["-c", code], child_env(), timeout=60)
  assert r.returncode == 0, r.output
  assert "MISSING" in r.stdout and "\\xff\\xfe-key" in r.stdout and "UnicodeDecodeError" not in r.output, r.output
  assert "HUGE b'v' True" in r.stdout and "HUGER b'w'" in r.stdout and "BARRIER ok" in r.stdout, r.output


def test_collectives_join_the_job_before_the_first_call():
  # Under myplugin-run, a collective called before any initialize joins the
  # job first: an all-reduce of two processes' ones is 2, never a silent 1.
  import sys
  code = ("import numpy as np\nfrom jax_plugin import collectives\n"
          "print('SUM', collectives.all_reduce(np.ones(4, np.float32)).tolist())\n")
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--timeout", "60", "--", sys.executable, "-c", code],
                 child_env(), timeout=120)
  assert r.returncode == 0, r.output
  assert r.stdout.count("SUM [2.0, 2.0, 2.0, 2.0]") == 2, r.output


def test_hello_is_capped_before_authentication(service):
  # An unauthenticated peer announcing a 1 MiB frame is refused before any
  # allocation: only a Hello (at most 64 KiB) is read before the token.
  with connect(service) as s:
    s.sendall(struct.pack("<I", 1 << 20) + b"\x01")
    kind, msg = recv_reply(s)
  assert kind == 3 and "exceeds the limit of 65536 bytes" in msg, msg


SERVICE_WITH_FEW_FDS = """
import resource, sys, time
from jax_plugin import _myplugin
# The hard limit too: the service raises its soft limit as far as that.
resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))
s = _myplugin.CoordinationService.start("127.0.0.1", 0, 2, "%s", 5.0, 60.0)
print(s.port, flush=True)
sys.stdin.readline()
s.stop()
""" % TOKEN


def test_descriptor_exhaustion_does_not_wedge_the_service():
  # With 96 descriptors allowed, 150 connections that send one byte exhaust
  # them; once they close, the service accepts again, and its accept errors
  # were logged at a bounded rate (not one line per failed accept).
  import time
  proc = subprocess.Popen([sys.executable, "-c", SERVICE_WITH_FEW_FDS], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                          start_new_session=True)
  try:
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "the service process did not start within 60 s"
    port = int(proc.stdout.readline())
    idle = []
    for _ in range(150):
      c = socket.create_connection(("127.0.0.1", port), timeout=10)
      c.sendall(b"\x01")
      idle.append(c)
    time.sleep(2.0)
    for c in idle:
      c.close()
    deadline = time.monotonic() + 20
    kind = 0
    while time.monotonic() < deadline:
      try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
          s.sendall(hello())
          kind, _ = recv_reply(s)
        if kind == 2:
          break
      except OSError:
        pass
      time.sleep(0.2)
    assert kind == 2, "the service never accepted a client again"
    # Wrong tokens, many: their log lines are rate-limited too.
    for _ in range(60):
      with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(hello(token="nope"))
        recv_reply(s)
    proc.stdin.write("\n")
    proc.stdin.flush()
    _, err = proc.communicate(timeout=30)
  finally:
    kill_group(proc)
    proc.wait(timeout=30)
  accept_lines = err.count("accept failed")
  rejected_lines = err.count("rejected a connection")
  assert 1 <= accept_lines <= 40, err[-2000:]
  assert rejected_lines <= 20 and "similar lines suppressed" in err, err[-2000:]


DESCRIPTOR_LIMITS = """
import resource
from jax_plugin import _myplugin
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 8192))
s = _myplugin.CoordinationService.start("127.0.0.1", 0, 3000, "%s", 5.0, 60.0)
print("raised to", resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
s.stop()
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
try:
  _myplugin.CoordinationService.start("127.0.0.1", 0, 3000, "%s", 5.0, 60.0)
except RuntimeError as e:
  print("refused:", e, flush=True)
""" % (TOKEN, TOKEN)


def test_service_takes_the_descriptors_a_big_job_needs():
  # A job of 3,000 processes: the service raises its soft limit (64) to the
  # connections it allows (2 x 3,000) + 64, within the hard limit; with a
  # hard limit of 1,024 it refuses to start, saying what it needs.
  r = run_python(["-c", DESCRIPTOR_LIMITS], child_env(), timeout=120)
  assert r.returncode == 0, r.output
  assert "raised to 6064" in r.stdout, r.output
  assert ("refused: RESOURCE_EXHAUSTED: the myplugin coordinator needs 3064 file descriptors (one per process of the job, and a few), "
          "and this process may open 1024 (its hard limit, ulimit -Hn, is 1024): raise it, e.g. ulimit -n 3064"
          in r.stdout), r.output


def _standalone(service, n=2):
  return {"MYPLUGIN_COORDINATOR_STANDALONE": "1", "MYPLUGIN_COORDINATOR_TOKEN": TOKEN,
          "MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{service.port}", "MYPLUGIN_NUM_PROCESSES": str(n)}


def _wait_for_connections(service, n, timeout=60):
  import time
  deadline = time.monotonic() + timeout
  while service.connections() != n:
    assert time.monotonic() < deadline, f"{service.connections()} connections, expected {n}"
    time.sleep(0.01)


def test_connection_limit_refuses_the_excess_and_members_go_on():
  s = _myplugin.CoordinationService.start("127.0.0.1", 0, 2, TOKEN, 5.0, 60.0, max_connections=6)
  try:
    strangers = [connect(s) for _ in range(4)]  # silent peers hold 4 of the 6
    _wait_for_connections(s, 4)
    # Process 1 stays for 8 s before its shutdown: both members hold their
    # connections while more peers knock.
    with Job(2, ["barrier_missing", "1", "8"], env=_standalone(s)) as job:
      _wait_for_connections(s, 6)
      for _ in range(5):
        with connect(s) as extra:
          kind, msg = recv_reply(extra)
          assert kind == 3, msg
          assert "has 6 connections open (its limit); try again later" in msg, msg
      assert job.wait(timeout=60) == {0: 0, 1: 0}, job.all_output()
      err = job.event(0, "barrier_error")["error"]
      assert "Barrier timed out: barrier '" in err and "waited 2 s; processes [1] did not arrive" in err, err
    assert s.failure() is None and s.all_departed()
    assert s.refused_connections() >= 5
    for c in strangers:
      c.close()
  finally:
    s.stop()


def test_clients_wait_for_room_at_a_full_coordinator():
  import time
  s = _myplugin.CoordinationService.start("127.0.0.1", 0, 2, TOKEN, 5.0, 60.0, max_connections=4)
  try:
    strangers = [connect(s) for _ in range(4)]
    _wait_for_connections(s, 4)
    with Job(2, ["kv_barrier"], env=_standalone(s)) as job:
      deadline = time.monotonic() + 60
      while s.refused_connections() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
      assert s.refused_connections() >= 2  # both members were turned away at first
      for c in strangers:
        c.close()
      assert job.wait(timeout=60) == {0: 0, 1: 0}, job.all_output()
    assert s.failure() is None and s.all_departed()
  finally:
    s.stop()


def test_oversize_value_is_refused_and_the_member_goes_on(service):
  # Straight to the service, past the client's own check: the member gets a
  # clear error and its connection keeps working.
  limit = _myplugin.COORDINATION_LIMITS["max_value_bytes"]
  value = b"x" * (limit + 1)
  with connect(service) as s:
    s.sendall(hello())
    assert recv_reply(s)[0] == 2
    s.sendall(frame(struct.pack("<BI", 7, 5) + struct.pack("<I", 1) + b"k" + struct.pack("<I", len(value)) + value))
    kind, msg = recv_reply(s)
    assert kind == 3 and 'key_value_set of "k": value of 32 MiB exceeds the 32 MiB limit' in msg, msg
    s.sendall(frame(struct.pack("<BI", 9, 6) + struct.pack("<I", 1) + b"k"))  # TryGet
    kind, msg = recv_reply(s)
    assert kind == 3 and "key 'k' is not set" in msg, msg
    assert service.failure() is None


def test_waiting_calls_are_capped_per_process(service):
  # Straight to the service: one process with its limit of blocking gets
  # outstanding gets a clear error for the next one; its connection and the
  # other process go on.
  cap = _myplugin.COORDINATION_LIMITS["max_waiting_per_process"]
  assert cap == 256
  get = lambda rid, key: frame(struct.pack("<BI", 8, rid) + _bytes_field(key) + struct.pack("<Q", 60000))
  with connect(service) as s, connect(service) as other:
    s.sendall(hello(pid=0))
    assert recv_reply(s)[0] == 2
    other.sendall(hello(pid=1))
    assert recv_reply(other)[0] == 2
    s.sendall(b"".join(get(100 + i, b"never/%d" % i) for i in range(cap)))
    s.sendall(get(99, b"one-more"))
    kind, msg = recv_reply(s)
    assert kind == 3 and msg == ('key_value_get of "one-more": process 0 already has 256 blocking gets and '
                                 'barriers waiting (the per-process limit)'), msg
    other.sendall(get(7, b"never/0"))  # the other process may still wait
    other.sendall(frame(struct.pack("<BI", 7, 8) + _bytes_field(b"never/0") + _bytes_field(b"v")))  # Set
    assert recv_reply(other)[0] == 12  # its own get, answered by its set
    assert recv_reply(other)[0] == 4   # the set's Ok
    assert recv_reply(s)[0] == 12      # and the first of process 0's gets
    assert service.failure() is None


def test_key_value_limits_give_clear_errors_and_the_job_goes_on():
  with Job(1, ["kv_limits"]) as job:
    assert job.wait(timeout=120) == {0: 0}, job.all_output()
    ev = job.event(0, "kv_limits")
  errors = ev["errors"]
  assert errors["value"] == 'RESOURCE_EXHAUSTED: key_value_set of "k": value of 80 MiB exceeds the 32 MiB limit'
  assert "RESOURCE_EXHAUSTED" in errors["key"] and "key of 4.883 KiB exceeds the 4 KiB limit" in errors["key"]
  assert errors["list"] == ('RESOURCE_EXHAUSTED: key_value_list of prefix "big/": the reply of 90 MiB exceeds the '
                            '64 MiB message limit (list a narrower prefix, or get the keys one by one)')
  assert "RESOURCE_EXHAUSTED" in errors["store"] and "over its 256 MiB limit" in errors["store"], errors
  assert ev["stored"] == 8  # 8 x 30 MiB fit in 256 MiB, a ninth does not
  assert ev["listed_one"] == ["big/1"] and ev["after"] == "still works"
  assert "lost the connection" not in job.output(0)


def _bytes_field(b: bytes) -> bytes:
  return struct.pack("<I", len(b)) + b


def _read_frames_until_closed(sock, deadline_s=20):
  """Every (type, request id) the service sends until it closes."""
  import time
  sock.settimeout(deadline_s)
  data, end = b"", time.monotonic() + deadline_s
  while time.monotonic() < end:
    chunk = sock.recv(1 << 20)
    if not chunk:
      break
    data += chunk
  frames, i = [], 0
  while i + 4 <= len(data):
    (n,) = struct.unpack("<I", data[i:i + 4])
    if i + 4 + n > len(data):
      break
    kind, rid = struct.unpack("<BI", data[i + 4:i + 9])
    frames.append((kind, rid))
    i += 4 + n
  return frames


def test_shutdown_release_reaches_a_peer_still_reading_when_the_host_stops():
  """The host stops its service as soon as its own shutdown barrier returns.
  A peer whose release still sits behind large replies, and that keeps
  sending (a heartbeat), must still read every reply, the release last,
  before the connection ends: it once lost it and exited with an error."""
  import threading, time
  service = _myplugin.CoordinationService.start("127.0.0.1", 0, 2, TOKEN, 5.0, 60.0)
  try:
    host, late = connect(service), connect(service)
    host.sendall(hello(pid=0))
    assert recv_reply(host)[0] == 2
    late.sendall(hello(pid=1))
    assert recv_reply(late)[0] == 2
    late.sendall(frame(struct.pack("<BI", 7, 1) + _bytes_field(b"big") + _bytes_field(b"x" * (8 << 20))))
    assert recv_reply(late)[0] == 4
    # 48 MiB of replies queued for `late`, which does not read them yet.
    for rid in range(2, 8):
      late.sendall(frame(struct.pack("<BI", 8, rid) + _bytes_field(b"big") + struct.pack("<Q", 10000)))
    late.sendall(frame(struct.pack("<BIQ", 15, 100, 60000)))
    time.sleep(0.2)
    host.sendall(frame(struct.pack("<BIQ", 15, 1, 60000)))
    assert recv_reply(host)[0] == 4  # released
    stopper = threading.Thread(target=service.stop)
    stopper.start()
    time.sleep(0.3)
    late.sendall(frame(struct.pack("<BI", 16, 0)))
    frames = [f for f in _read_frames_until_closed(late) if f[0] not in (16, 19)]
    stopper.join(timeout=30)
    assert not stopper.is_alive()
    assert frames == [(12, rid) for rid in range(2, 8)] + [(4, 100)], frames
    host.close()
    late.close()
  finally:
    service.stop()


def test_a_process_of_an_earlier_attempt_is_refused_after_a_restart():
  service = _myplugin.CoordinationService.start("127.0.0.1", 0, 2, TOKEN, 5.0, 60.0)
  try:
    assert service.attempt == 0
    with connect(service) as old:
      old.sendall(hello(pid=0))
      assert recv_reply(old)[0] == 2
      old.sendall(frame(struct.pack("<BI", 7, 1) + _bytes_field(b"k") + _bytes_field(b"v")))
      assert recv_reply(old)[0] == 4
      service.restart("n3w-t0ken", 3)
      assert service.attempt == 1
      # The earlier attempt's member is cut off ...
      assert recv_reply(old) == (0, "closed")
    # ... a late process of that attempt is told why it is refused ...
    with connect(service) as late:
      late.sendall(hello(pid=1))
      kind, msg = recv_reply(late)
      assert kind == 3 and "belongs to attempt 0 of this job, which was ended; the job has restarted (attempt 1)" in msg
    # ... and the new attempt has its own size and a clean slate.
    with connect(service) as new:
      new.sendall(hello(token="n3w-t0ken", pid=2))
      assert recv_reply(new)[0] == 2
      new.sendall(frame(struct.pack("<BI", 9, 5) + _bytes_field(b"k")))
      assert recv_reply(new) == (3, "key 'k' is not set")
    with pytest.raises(RuntimeError, match="a restart needs a new token"):
      service.restart("n3w-t0ken", 3)
    with pytest.raises(RuntimeError, match="between 1 and"):
      service.restart("other", 0)
  finally:
    service.stop()

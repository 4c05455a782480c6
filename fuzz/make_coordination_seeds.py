"""Writes the seed corpora of the coordination fuzz targets:
fuzz/corpus/coordination_messages_fuzzer/ (one encoded message payload per
file, every message type), fuzz/corpus/coordination_frame_fuzzer/ (streams
of frames) and fuzz/corpus/coordination_service_fuzzer/ (event
scripts in the format coordination_service_fuzzer.cc reads: a job that says
Hello, registers, uses the store and barriers, and fails or shuts down).

The encoding below is the one of plugin/coordination/wire.h and messages.h;
tests/cpp/coordination_tests.cc checks the C++ side of it.

  python fuzz/make_coordination_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x4D59504C
VERSION = 7  # wire.h kProtocolVersion
TYPES = dict(Hello=1, HelloOk=2, Error=3, Ok=4, Register=5, Topology=6, KeyValueSet=7, KeyValueGet=8,
             KeyValueTryGet=9, KeyValueDelete=10, KeyValueList=11, Value=12, Entries=13, Barrier=14,
             Shutdown=15, Heartbeat=16, Failure=17, ReportError=18, PeerShutdown=19, Agree=20,
             Membership=21, KeyValueInsert=22, KeyValueIncrement=23)


def b(s: bytes) -> bytes:
  return struct.pack("<I", len(s)) + s


def payload(kind: str, rid: int, fields: bytes = b"") -> bytes:
  return struct.pack("<BI", TYPES[kind], rid) + fields


def varint(v: int) -> bytes:
  out = b""
  while v >= 0x80:
    out += bytes([v & 0x7F | 0x80])
    v >>= 7
  return out + bytes([v])


def process_info(host: bytes, pid: int, devices=2, kind=b"cpu", address=b"10.0.0.1", host_id=b"boot/h/net:1"):
  """process_info.h's EncodeProcessInfo: a Register body (header unused)."""
  return (struct.pack("<BI", TYPES["Register"], 0) + b(host) + struct.pack("<I", devices) + b(kind) +
          struct.pack("<I", pid) + b(address) + b(host_id))


def step(d: int) -> bytes:  # an incarnation: its difference from the entry before's, zigzagged
  return varint(2 * d if d >= 0 else -2 * d - 1)


def raw_entry(t: bytes) -> bytes:  # a topology table's entry for bytes that are not a ProcessInfo
  return b"\x00" + varint(len(t)) + t


def whole(s: bytes) -> bytes:  # a table's string field that keeps nothing of the previous one
  return varint(0) + varint(0) + varint(len(s)) + s


# The first ProcessInfo entry of a table (every field differs from a default
# one), then a second process of the same host (only its pid differs: +1).
FIRST_INFO_ENTRY = (b"\x9f" + varint(2 * 100) + varint(2) + whole(b"h") + whole(b"cpu") + whole(b"10.0.0.1") +
                    whole(b"boot/h/net:1"))
SAME_HOST_ENTRY = b"\x80" + varint(2)


MESSAGES = {
    "hello": payload("Hello", 0, struct.pack("<IH", MAGIC, VERSION) + b(b"tok") + struct.pack("<I", 1)),
    "hello_ok": payload("HelloOk", 0, struct.pack("<IQQ", 3, 100, 1000)),
    # code, message, then the failure: kind, processes, collective, call (-1: none)
    "error": payload("Error", 4, struct.pack("<I", 5) + b(b"key 'k' is not set") + struct.pack("<II", 0, 0) + b(b"") +
                     struct.pack("<q", -1)),
    "error_timeout": payload("Error", 5, struct.pack("<I", 4) + b(b"Barrier timed out") +
                             struct.pack("<III", 2, 1, 2) + b(b"barrier 'b'") + struct.pack("<q", -1)),
    "ok": payload("Ok", 3),
    "register": payload("Register", 1, struct.pack("<I", 3) + b(b"host|4|cpu|123")),
    "register_process_info": payload("Register", 1, struct.pack("<I", 3) + b(process_info(b"h", 100))),
    "topology": payload("Topology", 1, struct.pack("<I", 2) + step(1) + raw_entry(b"a") + step(1) + raw_entry(b"b")),
    "topology_table": payload("Topology", 1, struct.pack("<I", 3) + step(1) + FIRST_INFO_ENTRY + step(1) +
                              raw_entry(b"odd") + step(-300) + SAME_HOST_ENTRY),
    "kv_set": payload("KeyValueSet", 2, b(b"gloo/0") + b(b"\x00\x01addr")),
    "kv_get": payload("KeyValueGet", 3, b(b"gloo/0") + struct.pack("<Q", 5000)),
    "kv_try_get": payload("KeyValueTryGet", 4, b(b"k")),
    "kv_insert": payload("KeyValueInsert", 10, b(b"k") + b(b"first")),
    "kv_increment": payload("KeyValueIncrement", 11, b(b"n") + struct.pack("<q", -3)),
    "kv_delete": payload("KeyValueDelete", 5, b(b"k")),
    "kv_list": payload("KeyValueList", 6, b(b"gloo/")),
    "value": payload("Value", 3, b(b"v")),
    "entries": payload("Entries", 6, struct.pack("<I", 2) + b(b"a") + b(b"1") + b(b"b") + b(b"")),
    "barrier": payload("Barrier", 7, b(b"sync") + struct.pack("<Q", 10000)),
    "shutdown": payload("Shutdown", 8, struct.pack("<Q", 10000)),
    "heartbeat": payload("Heartbeat", 0),
    "failure": payload("Failure", 0, struct.pack("<I", 2) + b(b"lost its connection")),
    "report_error": payload("ReportError", 0, b(b"Traceback ...")),
    "peer_shutdown": payload("PeerShutdown", 0, struct.pack("<I", 1)),
    "agree": payload("Agree", 9, struct.pack("<Q", 10000)),
    "membership": payload("Membership", 9, struct.pack("<QI", 1, 2) + varint(0) + step(1) + raw_entry(b"t0") +
                          varint(2) + step(2) + raw_entry(b"t2")),
    "membership_table": payload("Membership", 9, struct.pack("<QI", 1, 2) + varint(0) + step(1) + FIRST_INFO_ENTRY +
                                varint(300) + step(600) + SAME_HOST_ENTRY),
}


# Events of the service fuzzer: op byte = kind (low 3 bits) | connection << 4.
def hello(conn, pid, wrong_token=False):
  return bytes([0 | conn << 4, pid | (0x80 if wrong_token else 0)])


def request(conn, kind, rid, rest=b""):
  return bytes([2 | conn << 4, kind, rid]) + rest


def key(i):  # index into the fuzzer's key alphabet
  return bytes([i])


def kv_set(conn, rid, k, n):
  return request(conn, 0, rid, key(k) + struct.pack("<H", n))


def kv_get(conn, rid, k, ms):
  return request(conn, 1, rid, key(k) + struct.pack("<H", ms))


def barrier(conn, rid, k, ms):
  return request(conn, 5, rid, key(k) + struct.pack("<H", ms))


def register(conn, rid):
  return request(conn, 6, rid, bytes([3, 4]) + b"topo")


# A ProcessInfo topology (the fuzzer's length byte with its top bit set):
# hostname and address lengths in the low bits, then devices, pid, host id.
def register_info(conn, rid, host):
  return request(conn, 6, rid, bytes([3, 0x80 | 1 << 3 | 1]) + host + bytes([2]) + struct.pack("<H", 100 + conn) +
                 b"a" + bytes([1]) + host)


def shutdown(conn, rid):
  return request(conn, 7, rid, struct.pack("<H", 5000))


def agree(conn, rid, ms):
  return request(conn, 8, rid, struct.pack("<H", ms))


def tick(tenths):
  return bytes([5]) + struct.pack("<H", tenths)


# The launcher's word (kind 7): process `pid` ended with exit code `code`
# (`rejoin`: it is being started again, said first, as the launcher does),
# or only whether it is being started again.
def process_ended(pid, code, rejoin=False):
  return bytes([7, pid | (0x80 if rejoin else 0), code])


def expect_rejoin(pid, expected):
  return bytes([7, pid | 0x40 | (0x20 if expected else 0)])


JOB = hello(0, 0) + hello(1, 1) + hello(2, 2) + register(0, 1) + register(1, 1) + register(2, 1)
SCRIPTS = {
    "register": JOB,
    "register_process_info": hello(0, 0) + hello(1, 1) + hello(2, 2) + register_info(0, 1, b"x") +
                             register_info(1, 1, b"x") + register_info(2, 1, b"y"),
    "kv": JOB + kv_get(1, 2, 0, 5000) + kv_set(0, 2, 0, 16) + request(2, 4, 3, key(2)) +
          request(1, 3, 4, key(0)) + request(2, 2, 5, key(0)),
    # Two processes race to create key 0, then count on key 1 (kinds 10 and 11).
    "kv_insert_increment": JOB + request(0, 10, 2, key(0) + struct.pack("<H", 3)) +
                           request(1, 10, 2, key(0) + struct.pack("<H", 5)) +
                           request(2, 11, 2, key(1) + struct.pack("<H", 32769)) +
                           request(0, 11, 3, key(1) + struct.pack("<H", 32770)) + request(1, 11, 3, key(0)),
    "barrier": JOB + barrier(0, 2, 1, 1000) + barrier(1, 2, 1, 1000) + barrier(2, 2, 1, 1000),
    "barrier_timeout": JOB + barrier(0, 2, 1, 1000) + tick(20),
    "shutdown": JOB + shutdown(0, 9) + shutdown(1, 9) + shutdown(2, 9),
    "strangers": hello(0, 0, wrong_token=True) + hello(1, 3) + hello(2, 1) + hello(3, 1) +
                 bytes([1 | 3 << 4, 4]) + b"\xff\xff\xff\xff",
    "failure": JOB + barrier(1, 2, 1, 1000) + bytes([3 | 0 << 4]) + kv_set(1, 3, 1, 4),
    "stopped_reader": JOB + kv_get(2, 2, 0, 5000) + bytes([4 | 2 << 4]) + kv_set(0, 3, 0, 4),
    "heartbeat_timeout": JOB + bytes([6 | 0 << 4, 6 | 1 << 4]) + tick(150),
    # Process 2 dies; the survivors agree; it comes back and is let in at the next agreement.
    "recovery": JOB + barrier(0, 2, 1, 1000) + bytes([3 | 2 << 4]) + agree(0, 3, 5000) + agree(1, 3, 5000) +
                hello(3, 2) + register(3, 1) + agree(0, 4, 5000) + agree(1, 4, 5000) + barrier(0, 5, 1, 1000),
    "agreement_timeout": JOB + bytes([3 | 2 << 4]) + agree(0, 3, 100) + tick(20) + agree(1, 3, 100),
    # The launcher reaps process 2 while its connection is still open (a
    # child holds it) and starts it again: the new process takes the id at once.
    "process_ended_rejoin": JOB + barrier(0, 2, 1, 1000) + process_ended(2, 9, rejoin=True) + agree(0, 3, 5000) +
                            agree(1, 3, 5000) + hello(3, 2) + register(3, 1) + barrier(0, 5, 1, 1000),
    # A second process 1 is refused while the first lives, let in once it ended.
    "process_ended_duplicate": JOB + hello(3, 1) + process_ended(1, 1) + hello(3, 1) + register(3, 1) +
                               agree(0, 3, 5000) + agree(2, 3, 5000),
    # No restarts left: the agreement stops waiting for it.
    "process_ended_given_up": JOB + expect_rejoin(2, True) + process_ended(2, 9) + agree(0, 3, 5000) +
                              expect_rejoin(2, False) + agree(1, 3, 5000),
    # Before registration completed, after shutdown, an id out of range.
    "process_ended_early": process_ended(0, 1) + hello(0, 0) + process_ended(0, 1) + hello(1, 0) + process_ended(3, 0),
    "process_ended_after_shutdown": JOB + shutdown(0, 9) + shutdown(1, 9) + shutdown(2, 9) + process_ended(0, 0) +
                                    hello(3, 0),
}


def frame(p: bytes) -> bytes:
  return struct.pack("<I", len(p)) + p


# coordination_frame_fuzzer: a cap byte (odd: the Hello cap; even: 64 bytes),
# then a stream of frames, as a connection carries them.
FRAMES = {
    "handshake": b"\x01" + frame(MESSAGES["hello"]) + frame(MESSAGES["register"]) + frame(MESSAGES["kv_set"]),
    "replies": b"\x01" + b"".join(frame(MESSAGES[k]) for k in ("hello_ok", "topology", "ok", "error")),
    "small_cap": b"\x00" + frame(MESSAGES["kv_get"]) + frame(MESSAGES["hello"]),
    "truncated": b"\x01" + frame(MESSAGES["barrier"])[:-3],
    "too_short": b"\x01" + struct.pack("<I", 4) + b"\x10\x00\x00\x00",
    "too_long": b"\x01" + struct.pack("<I", 0xFFFFFFFF) + MESSAGES["hello"],
}


def write(directory, items):
  os.makedirs(directory, exist_ok=True)
  for name, data in items.items():
    with open(os.path.join(directory, name), "wb") as f:
      f.write(data)


if __name__ == "__main__":
  write(os.path.join(HERE, "corpus", "coordination_messages_fuzzer"), MESSAGES)
  write(os.path.join(HERE, "corpus", "coordination_service_fuzzer"), SCRIPTS)
  write(os.path.join(HERE, "corpus", "coordination_frame_fuzzer"), FRAMES)

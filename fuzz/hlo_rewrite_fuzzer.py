"""Atheris (libFuzzer for Python) target: the HLO text rewrite of the
multi-process compile (jax_plugin/spmd) on mutated partitioned modules.

Each input is a module's text (seeds: fuzz/corpus/hlo_rewrite_fuzzer/, real
partitioned modules written by fuzz/make_hlo_seeds.py; tokens:
fuzz/hlo_rewrite.dict). The module's header gives its replica and partition
counts; the rewrite runs twice, as the compile calls it: with the host
engine's runtime device ids over a permuted device assignment, and with the
table lookup of half the devices, no fences. Invariants:
  - the rewrite ends in text or a refusal of its own type (HloTextError,
    UnsupportedProgram): any other exception is a finding;
  - when jaxlib's HLO parser accepts the input, it accepts the rewritten
    module too. (A module jaxlib rejects may come back rejected: the
    compile parses the rewrite's text with the same parser, whose error
    then names the bad line.)

    python fuzz/hlo_rewrite_fuzzer.py -dict=fuzz/hlo_rewrite.dict \
        -max_total_time=45 fuzz/corpus/hlo_rewrite_fuzzer
"""
import atexit
import os
import re
import select
import signal
import struct
import subprocess
import sys

import atheris
import numpy as np
from jax._src.lib import hlo

# The rewrite of this checkout, not of an installed myplugin (whose startup
# hook, myplugin-cluster.pth, may have imported its package already; jax,
# imported first, has run that hook).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in [m for m in sys.modules if m == "jax_plugin" or m.startswith("jax_plugin.")]:
  del sys.modules[_name]

with atheris.instrument_imports(include=["jax_plugin"]):
  from jax_plugin.spmd.hlo_text import HloTextError
  from jax_plugin.spmd.rewrite import rewrite_module

# Larger programs add time per input, not coverage.
_MAX_DEVICES = 64


def _parses(text: str) -> bool:
  try:
    hlo.hlo_module_from_text(text)
  except Exception:  # jaxlib's parse error (its type differs between versions)
    return False
  return True


class _ParseChecker:
  """Whether jaxlib parses a mutated input, asked of a child process: its
  parser aborts (a CHECK) on some malformed modules, e.g. a parameter
  number beyond the computation's, which XLA never prints. A child that
  dies on an input is replaced and the input counts as one jaxlib rejects.
  (The rewrite's output of a module jaxlib parses is parsed in this
  process: an abort there is the rewrite's finding, as the compile parses
  it in-process too.)"""

  _CHILD = ("import struct, sys\n"
            "from jax._src.lib import hlo\n"
            "r, w = sys.stdin.buffer, sys.stdout.buffer\n"
            "while (h := r.read(4)):\n"
            "  text = r.read(struct.unpack('<I', h)[0]).decode()\n"
            "  try:\n"
            "    hlo.hlo_module_from_text(text); ok = b'1'\n"
            "  except Exception:\n"
            "    ok = b'0'\n"
            "  w.write(ok); w.flush()\n")

  # Per input: jaxlib parses a module of this size in milliseconds; a
  # child that takes longer is stuck, and the input counts as rejected.
  _DEADLINE_S = 60

  def __init__(self):
    self.proc = None
    atexit.register(self.close)

  def close(self) -> None:
    """Ends the child and its process group (it has its own session)."""
    if self.proc is not None and self.proc.poll() is None:
      try:
        os.killpg(self.proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      self.proc.wait()

  def __call__(self, text: str) -> bool:
    if self.proc is None or self.proc.poll() is not None:
      self.proc = subprocess.Popen([sys.executable, "-c", self._CHILD], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    data = text.encode()
    try:
      self.proc.stdin.write(struct.pack("<I", len(data)) + data)
      self.proc.stdin.flush()
      ready, _, _ = select.select([self.proc.stdout], [], [], self._DEADLINE_S)
      answer = self.proc.stdout.read(1) if ready else b""
    except BrokenPipeError:
      answer = b""
    if answer == b"":
      self.close()  # died or stuck: the next input gets a fresh child
    return answer == b"1"


_input_parses = _ParseChecker()


def _count(header: str, key: str) -> int:
  m = re.search(rf"\b{key}=([0-9]+)", header)
  return int(m.group(1)) if m else 1


def TestOneInput(data: bytes) -> None:
  text = data.decode("utf-8", "replace")
  header = text.split("\n", 1)[0]
  replicas, partitions = _count(header, "replica_count"), _count(header, "num_partitions")
  if not 0 < replicas * partitions <= _MAX_DEVICES:
    return
  devices = replicas * partitions
  # Global ids in an order that is not the identity, as on a real job.
  assignment = np.arange(devices)[::-1].reshape(replicas, partitions).tolist()
  valid = None
  for kwargs in ({"runtime_device_ids": True, "combine_threshold": 1 << 20},
                 {"local_order": [d for d in range(devices) if d % 2 == 0], "fences": False,
                  "widen_narrow_sums": False, "streams": True, "engine": "cuda"}):
    try:
      out = rewrite_module(text, assignment, devices, **kwargs)
    except HloTextError:
      continue
    if valid is None:
      valid = _input_parses(text)
    if valid and not _parses(out):
      raise AssertionError(f"the rewrite ({kwargs}) of a module jaxlib parses does not parse:\n{out}")


def main() -> None:
  atheris.Setup(sys.argv, TestOneInput)
  atheris.Fuzz()


if __name__ == "__main__":
  main()

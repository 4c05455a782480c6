"""Writes fuzz/corpus/device_assignment_fuzzer/: serialized compile options
as jax hands them to a PJRT plugin (jaxlib's own CompileOptions), with and
without a device assignment, with debug options, and one bare
DeviceAssignmentProto.

    python fuzz/make_device_assignment_seeds.py
"""
import os

import numpy as np
from jax._src.lib import xla_client as xc

HERE = os.path.dirname(os.path.abspath(__file__))


def options(assignment=None, replicas=1, partitions=1, env=()) -> bytes:
  o = xc.CompileOptions()
  o.num_replicas = replicas
  o.num_partitions = partitions
  if assignment is not None:
    o.device_assignment = xc.DeviceAssignment.create(np.array(assignment, dtype=np.int64))
  o.env_option_overrides = list(env)
  return o.SerializeAsString()


SEEDS = {
    "no_assignment": options(),
    "one_device": options([[0]]),
    "replicas_4": options([[0], [1], [2], [3]], replicas=4),
    "partitions_8": options([[7, 6, 5, 4, 3, 2, 1, 0]], partitions=8),
    "grid_2x4": options([[0, 1, 2, 3], [4, 5, 6, 7]], replicas=2, partitions=4),
    "large_ids": options([[1000, 2**40]], partitions=2),
    "debug_options": options([[0, 1]], partitions=2, env=[("xla_dump_to", "/tmp/x"), ("xla_backend_optimization_level", 0),
                                                         ("xla_dump_hlo_as_text", True)]),
    "bare_assignment": xc.DeviceAssignment.create(np.array([[0, 1], [2, 3]], dtype=np.int64)).serialize()
    if hasattr(xc.DeviceAssignment, "serialize") else b"\x08\x02\x10\x02\x1a\x04\x0a\x02\x00\x02\x1a\x04\x0a\x02\x01\x03",
}

if __name__ == "__main__":
  out = os.path.join(HERE, "corpus", "device_assignment_fuzzer")
  os.makedirs(out, exist_ok=True)
  for name, data in SEEDS.items():
    with open(os.path.join(out, name), "wb") as f:
      f.write(data)

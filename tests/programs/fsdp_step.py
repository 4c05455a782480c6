"""An FSDP training step (bench/training_step.py's: weights sharded by rows
over every device, gathered before use, each gradient an all-reduce and a
slice of the device's rows after partitioning) run a few steps. Knows
nothing of myplugin: run it in one process (JAX_PLATFORMS=cpu,
JAX_NUM_CPU_DEVICES=N) for the reference, or under myplugin-run.

usage: python fsdp_step.py OUT.npz [--steps N] [--layers L]   ({rank} in OUT is the process index)

Saves `loss` (one per step) and w<layer>_<k>.<device id>: the final rows
of each weight that each of this process's devices holds.
"""
import argparse
import os
import sys

import jax
import numpy as np
from jax.sharding import Mesh

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import training_step  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--layers", type=int, default=2)
args = parser.parse_args()

mesh = Mesh(np.array(jax.devices()), ("d",))
ws, x = training_step.fsdp_inputs(mesh, args.layers, d=64, f=128, tokens=64)
step = training_step.fsdp_step(mesh, args.layers)
losses = []
for _ in range(args.steps):
  ws, loss = step(ws, x)
  losses.append(float(loss))
saved = {"loss": np.asarray(losses)}
for i, pair in enumerate(ws):
  for k, w in enumerate(pair):
    for s in w.addressable_shards:
      saved[f"w{i}_{k}.{s.device.id}"] = np.asarray(s.data)
np.savez(args.out.format(rank=jax.process_index()), **saved)
print(f"process {jax.process_index()}: losses {losses}", flush=True)

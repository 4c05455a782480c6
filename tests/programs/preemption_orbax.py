"""orbax-checkpoint's CheckpointManager, unchanged, in
a loop that a preemption notice interrupts: the manager saves at the sync
step (should_save is true there), the loop ends; a later run restores the
latest step and trains to the end. The loss after `steps` steps is printed
by process 0.

  preemption_orbax.py DIR R@S|none STEPS [--every K] [--save-on S,...] [--size N] [--second R]

The manager saves the first step after the start (orbax's initial save)
and the preemption step; --every K: every K steps too; --save-on: those
steps too. --size N: the state also holds N float32 (counting the steps
run), which makes each save longer. --second R: process R sends itself
SIGTERM right after manager.save() of the preemption step returned, while
orbax writes it (a second notice for a process that had none, the second
SIGTERM for one that had). Each process prints `SAVING <step> <wall time>`
before a save, `SAVED <step> <wall time>` once it is written, and
`SIGNALLED <wall time> <committed>` when it sends the second SIGTERM
(committed: whether the step's save was complete then); `RUNNING <pid>`
once SIGTERM is a notice, at the third step after the start (the saves
before it done).
"""
import argparse
import json
import os
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("directory")
parser.add_argument("notices")
parser.add_argument("steps", type=int)
parser.add_argument("--every", type=int, default=10**6)
parser.add_argument("--save-on", default="")
parser.add_argument("--size", type=int, default=0)
parser.add_argument("--second", type=int, default=None)
args = parser.parse_args()
notices = {int(r): int(s) for r, s in (x.split("@") for x in args.notices.split(",") if "@" in x)}
me = jax.process_index()
mesh = jax.make_mesh((jax.device_count(),), ("d",))
rep = NamedSharding(mesh, P())
rng = np.random.default_rng(0)
xs = rng.normal(size=(8, 4)).astype(np.float32)
ys = xs @ np.arange(1, 5, dtype=np.float32)


@jax.jit
def step_fn(state):
  w = state["w"]
  loss, g = jax.value_and_grad(lambda w: jnp.mean((jnp.asarray(xs) @ w - jnp.asarray(ys)) ** 2))(w)
  return dict(state, w=w - 0.05 * g, **({"big": state["big"] + 1} if "big" in state else {})), loss


# The default interval would save every step.
manager = ocp.CheckpointManager(args.directory, options=ocp.CheckpointManagerOptions(
    save_interval_steps=args.every, save_on_steps=[int(s) for s in args.save_on.split(",") if s] or None))
state = {"w": jax.device_put(np.zeros(4, np.float32), rep)}
if args.size:  # (orbax saves no empty array)
  state["big"] = jax.device_put(np.zeros(args.size, np.float32), rep)
start = 0
if manager.latest_step() is not None:
  start = manager.latest_step()
  state = manager.restore(start, args=ocp.args.StandardRestore(state))
loss = None
for step in range(start, args.steps):
  if manager.should_save(step) and step != start:
    print(f"SAVING {step} {time.time()!r}", flush=True)
    manager.save(step, args=ocp.args.StandardSave(state))
    if args.second == me and manager.reached_preemption(step):
      # Whether orbax had already committed the step (renamed its folder into place).
      committed = os.path.isdir(os.path.join(args.directory, str(step)))
      print(f"SIGNALLED {time.time()!r} {committed}", flush=True)
      os.kill(os.getpid(), signal.SIGTERM)
    manager.wait_until_finished()
    print(f"SAVED {step} {time.time()!r}", flush=True)
    if manager.reached_preemption(step):
      print("RESULT " + json.dumps({"rank": me, "preempted_at": step}), flush=True)
      manager.close()
      raise SystemExit(0)
  if step == start + 3:
    print(f"RUNNING {os.getpid()}", flush=True)  # the sync point has been asked: SIGTERM is a notice now
  if notices.get(me) == step:
    os.kill(os.getpid(), signal.SIGTERM)
  state, loss = step_fn(state)
  time.sleep(0.02)  # a step's time: the notice reaches every process within a few
manager.close()
print("RESULT " + json.dumps({"rank": me, "start": start, "loss": float(loss), "w": np.asarray(state["w"]).tolist(),
                              "big": np.unique(np.asarray(state["big"])).tolist() if args.size else None}), flush=True)

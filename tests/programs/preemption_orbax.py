"""orbax-checkpoint's CheckpointManager, unchanged, in
a loop that a preemption notice interrupts: the manager saves at the sync
step (should_save is true there), the loop ends; a later run restores the
latest step and trains to the end. The loss after `steps` steps is printed
by process 0.

  preemption_orbax.py DIR R@S|none STEPS
"""
import json
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

directory, notices, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
notices = {int(r): int(s) for r, s in (x.split("@") for x in notices.split(",") if "@" in x)}
me = jax.process_index()
mesh = jax.make_mesh((jax.device_count(),), ("d",))
rep = NamedSharding(mesh, P())
rng = np.random.default_rng(0)
xs = rng.normal(size=(8, 4)).astype(np.float32)
ys = xs @ np.arange(1, 5, dtype=np.float32)


@jax.jit
def step_fn(w):
  loss, g = jax.value_and_grad(lambda w: jnp.mean((jnp.asarray(xs) @ w - jnp.asarray(ys)) ** 2))(w)
  return w - 0.05 * g, loss


# Saves only for preemption here (the default interval saves every step).
manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(save_interval_steps=10**6))
w = jax.device_put(np.zeros(4, np.float32), rep)
start = 0
if manager.latest_step() is not None:
  start = manager.latest_step()
  w = manager.restore(start, args=ocp.args.StandardRestore({"w": w}))["w"]
loss = None
for step in range(start, steps):
  if manager.should_save(step) and step != start:
    manager.save(step, args=ocp.args.StandardSave({"w": w}))
    manager.wait_until_finished()
    if manager.reached_preemption(step):
      print("RESULT " + json.dumps({"rank": me, "preempted_at": step}), flush=True)
      manager.close()
      sys.exit(0)
  if notices.get(me) == step:
    os.kill(os.getpid(), signal.SIGTERM)
  w, loss = step_fn(w)
  time.sleep(0.02)  # a step's time: the notice reaches every process within a few
manager.close()
print("RESULT " + json.dumps({"rank": me, "start": start, "loss": float(loss),
                              "w": np.asarray(w).tolist()}), flush=True)

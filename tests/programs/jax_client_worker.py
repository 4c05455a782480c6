"""Records what jax's distributed client and multihost_utils do in a
two-process job, however the job was started:

  jax_client_worker.py none|jax|plugin [explicit]

none: no initialize call (myplugin-run, MYPLUGIN_* variables); jax: an
unmodified jax.distributed.initialize(); plugin: jax_plugin.distributed's.
With 'explicit' the call gets ADDRESS and RANK from the environment,
otherwise it detects the job (Slurm, Open MPI). Prints one RESULT line whose
fields are compared with the same program on jax's own service.
"""
import json
import os
import re
import signal
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

how = sys.argv[1]
explicit = sys.argv[2:] == ["explicit"]
args = dict(coordinator_address=os.environ["ADDRESS"], num_processes=2,
            process_id=int(os.environ["RANK"])) if explicit else {}
if how == "jax":
  jax.distributed.initialize(**args)
elif how == "plugin":
  from jax_plugin import distributed
  distributed.initialize(**args)

from jax._src import distributed as jax_distributed  # noqa: E402

state = jax_distributed.global_state
c, me = state.client, state.process_id
other = 1 - me


def kind(e):
  """jax's error class, which jax callers catch (ours are subclasses of it:
  jax_plugin.errors), else the exception's own."""
  return "JaxRuntimeError" if isinstance(e, jax.errors.JaxRuntimeError) else type(e).__name__


def outcome(f):
  try:
    return ["ok", f()]
  except Exception as e:
    return ["error", kind(e), str(e).split(":")[0]]


def gist(f):
  """outcome, with the first three words of an error's message after its code."""
  try:
    return ["ok", f()]
  except Exception as e:
    code, _, rest = str(e).partition(":")
    return ["error", kind(e), code, re.findall(r"[A-Za-z-]+", rest)[:3]]


r = {"initialized": jax.distributed.is_initialized(), "process": [jax.process_index(), jax.process_count()],
     "state": [state.process_id, state.num_processes]}
r["set"] = outcome(lambda: c.key_value_set(f"w/{me}", f"v{me}"))
r["set_again"] = outcome(lambda: c.key_value_set(f"w/{me}", "x"))
r["overwrite"] = outcome(lambda: c.key_value_set(f"w/{me}", f"v{me}", allow_overwrite=True))
r["set_bytes"] = outcome(lambda: c.key_value_set_bytes(f"b/{me}", bytes([0, 255, me])))
r["barrier"] = outcome(lambda: c.wait_at_barrier("b1", 60000))
r["get_other"] = outcome(lambda: c.blocking_key_value_get(f"w/{other}", 60000))
r["get_bytes"] = outcome(lambda: list(c.blocking_key_value_get_bytes(f"b/{other}", 60000)))
r["try_present"] = outcome(lambda: c.key_value_try_get(f"w/{other}"))
r["try_missing"] = outcome(lambda: c.key_value_try_get("nope"))
r["timeout"] = outcome(lambda: c.blocking_key_value_get("never", 200))
r["dir"] = outcome(lambda: sorted(map(list, c.key_value_dir_get("w"))))
r["dir_slash"] = outcome(lambda: sorted(map(list, c.key_value_dir_get("w/"))))
r["dir_bytes"] = outcome(lambda: sorted([k, list(v)] for k, v in c.key_value_dir_get_bytes("b")))
r["subset_barrier"] = outcome(lambda: c.wait_at_barrier("b2", 60000, process_ids=[0, 1]))
r["barrier_again"] = outcome(lambda: c.wait_at_barrier("b3", 60000))
if me == 0:
  r["delete"] = outcome(lambda: c.key_value_delete("w"))
r["barrier_after_delete"] = outcome(lambda: c.wait_at_barrier("b4", 60000))
r["dir_after_delete"] = outcome(lambda: c.key_value_dir_get("w"))
# A process outside a barrier's list that calls it fails the barrier, for
# its members too; the processes go on together afterwards.
if me == 1:
  r["non_participant"] = gist(lambda: c.wait_at_barrier("np", 5000, process_ids=[0]))
  c.key_value_set("np_called", "1")
else:
  c.blocking_key_value_get("np_called", 60000)
  r["non_participant"] = gist(lambda: c.wait_at_barrier("np", 5000, process_ids=[0]))
r["barrier_after_non_participant"] = outcome(lambda: c.wait_at_barrier("b5", 60000))
# A barrier that process 0 never reaches.
if me == 1:
  r["never_reached"] = gist(lambda: c.wait_at_barrier("never", 1000))
r["barrier_after_timeout"] = outcome(lambda: c.wait_at_barrier("b6", 60000))
# Two processes race to create one key: exactly one wins. Increments add up.
c.wait_at_barrier("race", 60000)
c.key_value_set(f"race_result/{me}", outcome(lambda: c.key_value_set("race", f"p{me}"))[0])
r["increment_returns"] = outcome(lambda: type(c.key_value_increment("count", me + 1)).__name__)
c.wait_at_barrier("race_done", 60000)
r["race_outcomes"] = sorted(v for _, v in c.key_value_dir_get("race_result"))
r["race_value"] = outcome(lambda: c.key_value_try_get("race") in ("p0", "p1"))
r["increment_total"] = outcome(lambda: c.key_value_increment("count", 0))
r["increment_stored"] = outcome(lambda: c.key_value_try_get("count"))
r["increment_not_a_number"] = outcome(lambda: c.key_value_increment("race", 1))
r["live"] = outcome(lambda: sorted(c.get_live_nodes([0, 1])))
# Incarnations: one per process, every caller hears the same ones.
live = json.dumps(sorted(c.get_live_nodes([0, 1]).items()))
c.key_value_set(f"live/{me}", live)
r["live_same_everywhere"] = c.blocking_key_value_get(f"live/{other}", 60000) == live
r["live_distinct"] = len({i for _, i in json.loads(live)}) == 2
r["live_subset"] = outcome(lambda: sorted(c.get_live_nodes([me])))


def in_live_devices():
  with multihost_utils.live_devices(jax.devices()) as devices:
    return [d.id for d in devices] == sorted(d.id for d in jax.devices())


r["live_devices"] = outcome(in_live_devices)
r["allgather"] = multihost_utils.process_allgather(np.array([me, 10 + me])).tolist()
r["broadcast"] = multihost_utils.broadcast_one_to_all(np.array([me + 5])).tolist()
multihost_utils.sync_global_devices("synced")
multihost_utils.assert_equal(np.arange(3), "same everywhere")
r["assert_equal_differs"] = outcome(lambda: multihost_utils.assert_equal(np.array([me]), "differs"))


def preempted():
  """SIGTERM to process 1 at step 5 is a preemption notice: both processes
  reach the sync point at one step after it, and the signal ends nothing."""
  for step in range(2000):
    if multihost_utils.reached_preemption_sync_point(step):
      break
    if me == 1 and step == 5:
      os.kill(os.getpid(), signal.SIGTERM)
    multihost_utils.process_allgather(np.array([step]))
  else:
    return "never reached"
  c.key_value_set(f"synced/{me}", str(step))
  theirs = int(c.blocking_key_value_get(f"synced/{other}", 60000))
  return {"same_step": theirs == step, "after_the_notice": step > 5}


r["preemption"] = outcome(preempted)
extra = {"event": "extra", "client": type(c).__module__, "jax_service_started": state.service is not None}
# jax.distributed.shutdown() ends the job's distributed state, ours included.
jax.distributed.shutdown()
from jax_plugin import distributed as ours  # noqa: E402
r["after_shutdown"] = [jax.distributed.is_initialized(), ours.is_initialized()]
print("RESULT " + json.dumps(r), flush=True)
print("RESULT " + json.dumps(extra), flush=True)

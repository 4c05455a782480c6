"""A process of an in-place recovery test job (tests/test_recovery.py).
Identity from the MYPLUGIN_* variables, fate-sharing off; the scenario
from argv[1]; rank VICTIM (argv[2]) SIGKILLs itself. RESULT lines for the
test.

  verdict      the survivors' pending barrier fails naming the victim, a
               later key-value call too; they agree; a barrier of the
               survivors completes; they leave.
  no_agreement the survivors get the failure; survivor 1 asks for the
               agreement late (after the timeout): everyone gets an error.
  collective   a jit psum over every device; the victim dies before the
               second one; the survivors' psum raises naming it; they
               recover() and psum again over the three members.
  freeze       as respawn, but the victim stops itself (SIGSTOP) instead of
               dying: the service fails it by its heartbeat and the
               launcher ends it and starts it again.
  respawn      under myplugin-run --recover DEATHS --rejoin-wait: an
               all-reduce per step; the victim dies DEATHS times (steps 2, 5,
               8, ...), each time leaving a child that holds its connection
               to the service open, and is started again at once; the
               members redo the failed step with it back.
  straggler    (MYPLUGIN_STRAGGLER_SECONDS set) the victim dies; the survivors
               agree; after a first all-reduce of the members, the last one
               sleeps before the second, long enough for a straggler report.

usage: python recovery_worker.py SCENARIO VICTIM [DEATHS]
"""
import json
import os
import signal
import sys
import time

from jax_plugin import distributed
from error_fields import error_fields

scenario, victim = sys.argv[1], int(sys.argv[2])
pid = int(os.environ["MYPLUGIN_PROCESS_ID"])


def result(**kv):
  print("RESULT " + json.dumps(kv), flush=True)


def die():
  result(event="dying")
  os.kill(os.getpid(), signal.SIGKILL)


def verdict(m):
  return dict(epoch=m.epoch, members=m.members, process_id=m.process_id, num_processes=m.num_processes,
              changed=m.changed, incarnations=m.incarnations)


if scenario in ("respawn", "freeze"):
  import numpy as np
  from jax_plugin import collectives

  deaths_wanted, steps, hold_s = int(sys.argv[3]), 12, 8.0
  distributed.initialize(initialization_timeout=60, fate_sharing=False)
  m = distributed.membership()
  deaths = int(distributed.key_value_try_get("deaths") or b"0")
  step = int(distributed.key_value_get(f"resume/{m.epoch}", 60)) if os.environ.get("MYPLUGIN_REJOIN") else 0
  result(event="started", members=m.members, epoch=m.epoch, step=step, deaths=deaths, incarnations=m.incarnations)
  whole = len(m.members)

  def agree(step):
    m = distributed.agree_membership(timeout=60)
    if m.changed:
      if m.process_id == 0:
        distributed.key_value_set(f"resume/{m.epoch}", str(step))
      result(event="verdict", step=step, **verdict(m))
    return m

  while step < steps:
    if scenario == "freeze" and len(m.members) < whole and step >= 3:
      # The members wait here for the stopped rank's new process, which the
      # launcher starts only once it has ended the old one.
      time.sleep(0.1)
      m = agree(step)
      continue
    if pid == victim and deaths < deaths_wanted and step == 2 + 3 * deaths:
      distributed.key_value_set("deaths", str(deaths + 1))
      if scenario == "freeze":
        # Alive but silent: the service fails it by its heartbeat, and
        # only the launcher can end it.
        result(event="freezing")
        os.kill(os.getpid(), signal.SIGSTOP)  # the launcher SIGKILLs it here
        die()
      if os.fork() == 0:
        # The dead process's connection to the service stays open (its
        # child holds the socket), for longer than the respawn takes.
        time.sleep(hold_s)
        os._exit(0)
      die()
    try:
      got = collectives.all_reduce(np.array([(pid + 1) * (step + 1)], np.float64))
      result(event="step", step=step, total=float(got[0]),
             expected=float(sum((i + 1) * (step + 1) for i in m.members)), members=m.members)
      step += 1
    except RuntimeError as e:
      result(event="step_error", step=step, error=str(e))  # the step runs again with the verdict's members
    # At every step boundary: the restarted victim is let in here (at once,
    # or a step later when the survivors agreed before the launcher said it
    # was coming back).
    m = agree(step)
  sys.exit(0)

distributed.initialize(heartbeat_timeout_seconds=5, initialization_timeout=60, fate_sharing=False)
result(event="registered")

if scenario in ("verdict", "no_agreement"):
  distributed.barrier("start", timeout=30)
  if pid == victim:
    time.sleep(0.5)  # the others are waiting in the next barrier
    die()
  try:
    distributed.barrier("after", timeout=60)
    result(event="barrier_passed")  # must not happen
  except RuntimeError as e:
    result(event="barrier_error", error=str(e))
  try:
    distributed.key_value_get("never-set", timeout=60)
  except RuntimeError as e:
    result(event="kv_error", error=str(e))
  if scenario == "no_agreement" and pid == 1:
    time.sleep(4)  # past the others' agreement timeout
  try:
    m = distributed.agree_membership(timeout=2 if scenario == "no_agreement" else 60)
    result(event="verdict", **verdict(m))
  except RuntimeError as e:
    result(event="agreement_error", error=str(e))
    sys.exit(0)
  distributed.barrier("survivors", timeout=30)
  result(event="survivors_barrier")
  sys.exit(0)

if scenario == "straggler":
  import numpy as np
  from jax_plugin import collectives

  distributed.barrier("start", timeout=30)
  if pid == victim:
    die()
  try:
    distributed.barrier("after", timeout=60)
  except RuntimeError as e:
    result(event="barrier_error", error=str(e))
  m = distributed.agree_membership(timeout=60)
  result(event="verdict", **verdict(m))
  collectives.all_reduce(np.array([pid + 1], np.float64))  # the new epoch's communicator, made together
  if m.process_id == m.num_processes - 1:
    time.sleep(4)  # STRAGGLER_LINE: the members wait for it in the all-reduce
  got = collectives.all_reduce(np.array([pid + 1], np.float64))
  result(event="sum", total=float(got[0]))
  sys.exit(0)

if scenario == "collective":
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  def total():
    """Sum over every device of (the coordination id of its process + 1)."""
    mesh = Mesh(np.array(jax.devices()), ("d",))
    rows = NamedSharding(mesh, P("d"))
    mine = distributed.membership().members[distributed.process_id()] + 1
    local = np.full((1,), mine, np.float32)
    x = jax.make_array_from_process_local_data(rows, local, (jax.device_count(),))
    return float(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x))

  result(event="first", total=total(), process_count=jax.process_count())
  if pid == victim:
    die()
  time.sleep(1.0)  # the victim is gone before the second sum starts
  try:
    result(event="second_passed", total=total())  # must not happen
  except Exception as e:
    result(event="collective_error", type=type(e).__name__, **error_fields(e))
  m = distributed.recover(timeout=60)
  result(event="verdict", **verdict(m))
  result(event="third", total=total(), process_count=jax.process_count(), process_index=jax.process_index(),
         device_count=jax.device_count())
  sys.exit(0)

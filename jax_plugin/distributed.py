"""Multi-process bootstrap: myplugin's own coordination service.

``initialize`` takes the signature of ``jax.distributed.initialize``. It
starts the service in process 0 (unless a launcher hosts it), connects,
registers this process's devices, and returns once every process has
registered and the global topology is agreed. From then on the service
watches every process: if one dies, exits without shutting down, or stops
responding, every other process is told which one and why, and exits
(fate-sharing) unless ``fate_sharing=False``.

With ``fate_sharing=False`` a job may go on through failures (in-place
recovery, docs/clusters.md, "In-place recovery"): every pending and later collective,
barrier and key-value call of the survivors raises an error naming the
failed process; the survivors then call :func:`recover`, which agrees on
the new membership through the service (:func:`agree_membership`) and
rebuilds the backend over the members' devices.

One file: joining, leaving and the exit hooks share this
module's job state (the hosted service, whether this process has left);
addresses are addresses.py's.
"""

from __future__ import annotations

import atexit
import os
import sys
import socket

from typing import NamedTuple

from jax_plugin import _myplugin, cluster, errors  # errors: our bindings raise its classes
from jax_plugin.addresses import _candidate_addresses, _is_loopback, _loopback_of, _split_address, wildcard_host

_ENGINE_DEVICE_KIND = "cpu"
# The job's default timeouts, defined once in C++ (coordination/defaults.h).
DEFAULTS = _myplugin.DEFAULTS
# How long a process that ends with an uncaught exception waits for news of
# an earlier failure elsewhere before it reports its own (see
# _await_earlier_failure): far above the service's reaction to a lost
# connection, and paid only on a failing exit.
_PEER_FAILURE_GRACE_S = 1.0
# The key under which process 0 publishes the service's address in jax's
# own key-value store, when jax.distributed bootstraps the job.
JAX_KV_KEY = "myplugin/coordination_service"

_atexit_registered = False
_service = None  # the CoordinationService this process hosts, if any
_fate_sharing = True
_departed = False  # this process has left its job (shutdown)
# The PJRT client's create options for this process's devices in the job:
# how many it registered and, when given, which (local_device_ids).
_client_options = {}
# Who keeps state of its own in step with this process's job: called after
# it joined or its members changed, and before it leaves. jax's distributed
# client (jax_client) registers here, so that the runtime knows nothing of
# the adapters built on it.
_on_membership = []
_on_leave = []


def add_listener(on_membership, on_leave) -> None:
  """on_membership() runs once this process has joined a job and after each
  rebuild over new members; on_leave() before it leaves (shutdown)."""
  _on_membership.append(on_membership)
  _on_leave.append(on_leave)


def _tell(listeners) -> None:
  for listener in list(listeners):
    listener()


def _advertised_address() -> tuple[str, str]:
  """(address, interface) this process's peers reach it at, as the user
  named them; both empty (the default) means the local address of this
  process's connection to the coordinator."""
  address = os.environ.get("MYPLUGIN_GLOO_HOSTNAME", "").strip()
  interface = os.environ.get("MYPLUGIN_NETWORK_INTERFACE", "").strip()
  if address and interface:
    raise ValueError(f"MYPLUGIN_GLOO_HOSTNAME={address!r} and MYPLUGIN_NETWORK_INTERFACE={interface!r} are both set; "
                     "they say the same thing (where peers reach this process): set one")
  return address.strip("[]"), interface


def seconds_setting(variable: str, default: str) -> float:
  """Seconds from the environment variable the user set, else DEFAULTS[default]."""
  return float(os.environ.get(variable) or DEFAULTS[default])


def is_initialized() -> bool:
  return _myplugin.distributed_is_initialized()


def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None,
               local_device_ids: int | list[int] | None = None,
               cluster_detection_method: str | None = None,
               initialization_timeout: float = DEFAULTS["initialization_timeout"],
               heartbeat_timeout_seconds: float = DEFAULTS["heartbeat_timeout"],
               coordinator_bind_address: str | None = None,
               *,
               fate_sharing: bool = True) -> None:
  """Joins this process to a myplugin job. See the module docstring."""
  import sys

  if is_initialized():
    raise RuntimeError("jax_plugin.distributed.initialize should only be called once")
  # No backend can exist before jax is imported, and importing it here would
  # only slow the join down.
  xla_bridge = sys.modules.get("jax._src.xla_bridge")
  if xla_bridge is not None and xla_bridge.backends_are_initialized():
    raise RuntimeError("jax_plugin.distributed.initialize must be called before any JAX computation "
                       "(the backend already exists)")
  _initialize(coordinator_address, num_processes, process_id, local_device_ids, cluster_detection_method,
              initialization_timeout, heartbeat_timeout_seconds, coordinator_bind_address, fate_sharing)


def _initialize(coordinator_address, num_processes, process_id, local_device_ids, cluster_detection_method,
                initialization_timeout, heartbeat_timeout_seconds, coordinator_bind_address, fate_sharing,
                unauthenticated_ok=False):
  """unauthenticated_ok: jax.distributed.initialize's contract, whose own
  service has no authentication: without a token the service then listens
  on every interface, as jax's would (docs/architecture.md, "Threat model")."""
  global _atexit_registered
  explicit = coordinator_address is not None and num_processes is not None and process_id is not None
  spec = None if explicit and cluster_detection_method is None else cluster.detect(cluster_detection_method)
  spec_token = spec.token if spec is not None and spec.token else ""
  if spec is not None:
    coordinator_address = coordinator_address or spec.coordinator_address
    num_processes = spec.num_processes if num_processes is None else num_processes
    process_id = spec.process_id if process_id is None else process_id
    local_device_ids = spec.local_device_ids if local_device_ids is None else local_device_ids
  if coordinator_address is None or num_processes is None or process_id is None:
    raise ValueError("coordinator_address, num_processes and process_id are required: pass them, run under "
                     "myplugin-run, or set MYPLUGIN_COORDINATOR_ADDRESS, MYPLUGIN_NUM_PROCESSES and "
                     "MYPLUGIN_PROCESS_ID (Slurm, Open MPI and Kubernetes indexed Jobs with MYPLUGIN_NUM_PROCESSES are "
                     "detected too)")
  num_processes, process_id = int(num_processes), int(process_id)
  if num_processes < 1:
    raise ValueError(f"num_processes must be at least 1, got {num_processes}")
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id {process_id} is out of range for {num_processes} processes")

  if isinstance(local_device_ids, int):
    local_device_ids = [local_device_ids]
  visible_devices = None
  if local_device_ids is not None:
    num_devices = len(local_device_ids)
    # On GPUs the ids are CUDA ordinals, as CUDA_VISIBLE_DEVICES counts them.
    visible_devices = [int(i) for i in local_device_ids]
  elif os.environ.get("MYPLUGIN_NUM_DEVICES"):
    num_devices = int(os.environ["MYPLUGIN_NUM_DEVICES"])
  else:
    num_devices = _default_device_count()
  if num_devices < 1:
    raise ValueError(f"each process needs at least one device, got {num_devices}")

  host, port = _split_address(coordinator_address)
  token = os.environ.get("MYPLUGIN_COORDINATOR_TOKEN", "") or spec_token
  if not token and not _is_loopback(host) and not unauthenticated_ok:
    raise ValueError(
        f"the coordinator address {coordinator_address} is not on this host, and no token was given: set "
        "MYPLUGIN_COORDINATOR_TOKEN to the same secret in every process (without a token the service listens "
        "on loopback only)")
  host_service = process_id == 0 and os.environ.get("MYPLUGIN_COORDINATOR_STANDALONE") != "1"
  if host_service:
    if coordinator_bind_address is not None:
      bind_host, bind_port = _split_address(coordinator_bind_address)
    else:
      bind_host, bind_port = (wildcard_host() if token or not _is_loopback(host) else _loopback_of(host)), port
    _start_service(bind_host, bind_port, num_processes, token, heartbeat_timeout_seconds, initialization_timeout)
  _join([coordinator_address], num_processes, process_id, token, initialization_timeout, fate_sharing, num_devices,
        visible_devices)


def _start_service(bind_host, bind_port, num_processes, token, heartbeat_timeout, initialization_timeout):
  global _service
  _service = _myplugin.CoordinationService.start(bind_host, bind_port, num_processes, token,
                                                 float(heartbeat_timeout), float(initialization_timeout))
  return _service.port


def _join(addresses, num_processes, process_id, token, initialization_timeout, fate_sharing, num_devices,
          visible_devices=None):
  global _atexit_registered, _service, _fate_sharing, _client_options
  from jax_plugin import straggler
  try:
    straggler.check_settings()
    advertise_address, network_interface = _advertised_address()
    _myplugin.distributed_initialize(
        addresses=addresses, num_processes=num_processes, process_id=process_id, token=token,
        initialization_timeout=float(initialization_timeout), fate_sharing=bool(fate_sharing),
        hostname=socket.gethostname(), num_devices=num_devices, device_kind=_ENGINE_DEVICE_KIND,
        os_pid=os.getpid(), advertise_address=advertise_address, network_interface=network_interface)
  except BaseException:
    if _service is not None:
      _service.stop()
      _service = None
    raise
  _fate_sharing = bool(fate_sharing)
  _client_options = {"num_devices": num_devices}
  if visible_devices is not None:
    _client_options["visible_devices"] = visible_devices
  straggler.start()
  if not _atexit_registered:
    atexit.register(_shutdown_at_exit)
    _install_excepthook()
    _atexit_registered = True
  _tell(_on_membership)  # jax.distributed.is_initialized() is true from here on


_uncaught = []

def client_options() -> dict:
  """The PJRT client's create options for the job this process joined
  (registration passes them to jax's register_plugin): its device count,
  which the client checks against the registered topology, and its
  local_device_ids as the engine's visible devices. Empty outside a job."""
  return dict(_client_options) if is_initialized() else {}


def _install_excepthook() -> None:
  """An uncaught exception ends this process with an error: the others should
  learn that (and what it was) at once, not wait in the shutdown barrier."""
  import sys
  previous = sys.excepthook

  def hook(exc_type, exc, tb):
    _uncaught.append(f"{exc_type.__name__}: {exc}")
    previous(exc_type, exc, tb)

  sys.excepthook = hook


def initialize_through_jax(jax_state, initialization_timeout: float = DEFAULTS["initialization_timeout"],
                           heartbeat_timeout_seconds: float = DEFAULTS["heartbeat_timeout"]) -> None:
  """The job was started with jax.distributed.initialize: process 0 starts
  our service on a free port and publishes where it is (with a fresh token)
  in jax's own key-value store; the others read it there."""
  import secrets
  num_processes, process_id = int(jax_state.num_processes), int(jax_state.process_id)
  num_devices = int(os.environ.get("MYPLUGIN_NUM_DEVICES", "1") or "1")
  if process_id == 0:
    token = secrets.token_hex(16)
    try:
      port = _start_service(wildcard_host(), 0, num_processes, token, heartbeat_timeout_seconds, initialization_timeout)
    except Exception as e:
      # Tell the others at once rather than let them wait for the timeout.
      jax_state.client.key_value_set(JAX_KV_KEY, "error|" + str(e))
      raise
    addresses = _candidate_addresses(port)
    jax_state.client.key_value_set(JAX_KV_KEY, ",".join(addresses) + "|" + token)
  else:
    published = jax_state.client.blocking_key_value_get(JAX_KV_KEY, int(initialization_timeout * 1000))
    joined, _, token = published.partition("|")[0], None, published.partition("|")[2]
    if joined == "error":
      raise RuntimeError(f"process 0 could not start myplugin's coordination service: {token}")
    addresses = joined.split(",")
  _join(addresses, num_processes, process_id, token, initialization_timeout, True, num_devices)


def initialize_from_environment() -> bool:
  """Used by plugin registration: joins the job described by MYPLUGIN_* variables, if any."""
  spec = cluster.from_myplugin_env(os.environ) or cluster.from_kubernetes(os.environ)
  if spec is None or is_initialized() or _departed:
    return False
  _initialize(None, None, None, None, spec.method,
              seconds_setting("MYPLUGIN_INITIALIZATION_TIMEOUT", "initialization_timeout"),
              seconds_setting("MYPLUGIN_HEARTBEAT_TIMEOUT", "heartbeat_timeout"), None, True)
  return True


def shutdown(timeout: float | None = None) -> None:
  """The shutdown barrier: waits for every process to finish, then leaves."""
  global _service, _departed
  _tell(_on_leave)
  _departed = True
  if timeout is None:
    timeout = seconds_setting("MYPLUGIN_SHUTDOWN_TIMEOUT", "shutdown_timeout")
  _finish_dispatched_work()
  try:
    _myplugin.distributed_shutdown(float(timeout))
  finally:
    if _service is not None:
      _service.stop()
      _service = None


def _finish_dispatched_work() -> None:
  """jax dispatches asynchronously: a rank that never reads its results
  reaches its exit while its last steps still run, and their collectives
  are ones the others wait for. Entering shutdown tells the others that
  this process issues no more collectives, so it must first be true."""
  xla_bridge = sys.modules.get("jax._src.xla_bridge")
  jax = sys.modules.get("jax")
  if jax is None or xla_bridge is None or not xla_bridge.backends_are_initialized():
    return
  live_arrays = getattr(jax, "live_arrays", None)
  if live_arrays is None:
    return
  if not is_initialized():
    return  # one process: nobody waits for its collectives
  try:
    arrays = live_arrays("myplugin")
  except Exception:  # no backend of ours, say: nothing of ours to wait for
    return
  for a in arrays:
    try:
      a.block_until_ready()
    except Exception:
      pass  # a failed computation reports itself where its result is used


_finish_registered = False


def finish_dispatched_work_at_exit() -> None:
  """Called when our backend is created, hence after jax registered its own
  exit handler (which clears the backends, then shuts jax.distributed
  down): handlers run last-registered first, so this one still finds the
  backend and its arrays."""
  global _finish_registered
  if not _finish_registered:
    atexit.register(_finish_dispatched_work)
    _finish_registered = True


def _shutdown_at_exit() -> None:
  if not is_initialized():
    return
  if _uncaught and _await_earlier_failure() is None:
    _myplugin.report_error(f"exited with an uncaught exception: {_uncaught[-1]}"[:2000])
    return
  if _myplugin.failure() is None:
    try:
      shutdown()
      return
    except RuntimeError as e:
      if not _fate_sharing:
        raise
      # The failure that interrupted it was just said whole in this
      # process's notice (`seen by process N`): refer to it.
      said = _myplugin.failure() is not None
      print("myplugin: the shutdown barrier was interrupted by that failure" if said else f"myplugin: {e}",
            file=sys.stderr)
  if _fate_sharing:
    # The job failed while this process was finishing: it must not exit 0.
    sys.stdout.flush()
    sys.stderr.flush()
    _let_the_service_tell_the_others()
    os._exit(_myplugin.FATE_SHARING_EXIT_CODE)


def _let_the_service_tell_the_others() -> None:
  """Where this process hosts the service, the others must hear the job's
  failure from it before it goes: otherwise they only see their
  coordinator vanish, and report that instead of the cause. Waits until the
  service has taken in the failure, then stops it, which sends what it has
  queued (both bounded)."""
  global _service
  if _service is None:
    return
  import time
  deadline = time.monotonic() + _PEER_FAILURE_GRACE_S
  while _service.failure() is None and time.monotonic() < deadline:
    time.sleep(0.01)
  _service.stop()
  _service = None


def _await_earlier_failure():
  """An exception may be this process's own fault, or the echo of a peer that
  died an instant earlier (a collective whose connection broke before the
  service's notice arrived). The service is told which after a short wait,
  so that the job's failure names the process that caused it."""
  import time
  deadline = time.monotonic() + _PEER_FAILURE_GRACE_S
  while (failure := _myplugin.failure()) is None and time.monotonic() < deadline:
    time.sleep(0.01)
  return failure


def _default_device_count() -> int:
  """One device on the CPU engine (like jax's CPU backend); every GPU on the CUDA engine."""
  from jax_plugin import engine_selection
  try:
    engine = engine_selection.select()
  except engine_selection.EngineSelectionError:
    return 1  # the backend reports the error when it starts
  if engine.kind == "cuda":
    return max(1, engine_selection.probe_gpus()[0])
  return 1


def process_id() -> int:
  return _myplugin.process_id()


def num_processes() -> int:
  return _myplugin.num_processes()


def global_topology() -> list[dict]:
  """Every process's hostname, OS pid, device count and kind, collective
  address and host identity (equal where processes can share memory), in
  process order."""
  return _myplugin.global_processes()


def _bytes(v: str | bytes) -> bytes:
  return v.encode() if isinstance(v, str) else bytes(v)


def key_value_set(key: str | bytes, value: str | bytes) -> None:
  _myplugin.kv_set(_bytes(key), _bytes(value))


def key_value_get(key: str | bytes, timeout: float = 60) -> bytes:
  """Waits up to `timeout` seconds for the key to be set."""
  return _myplugin.kv_get(_bytes(key), float(timeout))


def key_value_try_get(key: str | bytes) -> bytes | None:
  return _myplugin.kv_try_get(_bytes(key))


def key_value_delete(key: str | bytes) -> None:
  _myplugin.kv_delete(_bytes(key))


def key_value_list(prefix: str | bytes) -> list[tuple[bytes, bytes]]:
  return _myplugin.kv_list(_bytes(prefix))


def barrier(name: str, timeout: float = 60) -> None:
  """Waits until every process reached `name`; the timeout error names the missing ones."""
  _myplugin.barrier(name, float(timeout))


def failure() -> str | None:
  """Why the job failed, once it has."""
  return _myplugin.failure()


class Membership(NamedTuple):
  """A membership agreement's verdict, the same on every member."""
  epoch: int          # changes with every change of the members
  members: list[int]  # the members' ids as they started (the launcher's ranks), ascending
  process_id: int     # this process's index in `members`: its jax.process_index() from now on
  num_processes: int  # len(members): jax.process_count() from now on
  changed: bool       # the epoch moved: the backend must be rebuilt (recover does it)
  incarnations: list[int]  # each member's (as `members`): new when that rank's process was started again


def agree_membership(timeout: float = DEFAULTS["agreement_timeout"]) -> Membership:
  """Every live member calls it at the same point of its program (after an
  error that names a failed process, or at a step boundary to let a
  restarted process back in); all get the same verdict, or all get an
  error (a member that does not ask within `timeout` seconds of the first
  one, a failure of the agreement itself). A process the launcher started
  again joins in its own initialize, answered by the same verdict."""
  before = _myplugin.epoch()
  _myplugin.distributed_agree(float(timeout))
  return _membership(changed=_myplugin.epoch() != before)


def membership() -> Membership:
  """The current members, as the last verdict (or the start) made them."""
  return _membership(changed=False)


def _membership(changed: bool) -> Membership:
  return Membership(epoch=_myplugin.epoch(), members=list(_myplugin.member_ids()),
                    process_id=_myplugin.process_id(), num_processes=_myplugin.num_processes(), changed=changed,
                    incarnations=[int(i) for i in _myplugin.member_incarnations()])


def recover(timeout: float = DEFAULTS["agreement_timeout"]) -> Membership:
  """agree_membership, then, if the members changed, the backend rebuilt
  over theirs devices: jax's backends and caches are cleared (every array
  of the old backend is gone: restore from your own checkpoint), and the
  next computation creates our client for the new membership, with new
  communicators. Process ids are the members' indices (dense, as jax wants
  them); the original ids stay in ``members``."""
  verdict = agree_membership(timeout)
  if verdict.changed:
    rebuild_backend()
  return verdict


def rebuild_backend() -> None:
  """Drops jax's backends and compiled code, so the next computation
  creates them again over the current membership."""
  jax = sys.modules.get("jax")
  if jax is not None:
    import jax.extend.backend
    jax.clear_caches()
    jax.extend.backend.clear_backends()
  _myplugin.forget_collective_failure()  # the old backend's: errors.typed must not report it again
  _tell(_on_membership)  # jax.process_index()/process_count() from the new membership

"""jax's distributed client, served by myplugin's coordination service.

Libraries reach "the distributed system" through
``jax._src.distributed.global_state.client`` (orbax-checkpoint's barriers
and key-value exchanges, ``multihost_utils``), and
``jax.distributed.is_initialized()`` is just ``client is not None``. Once a
process belongs to a myplugin job, however it joined, :func:`sync` puts a
:class:`Client` there: jaxlib's ``DistributedRuntimeClient`` API over our
key-value store and barriers, so no gRPC service of jax's runs beside ours.

jaxlib's own factories (the ``cpu`` client and its Gloo collectives, other
PJRT plugins, our own client) take that object as a C++ client and would
reject a Python one, so every backend is created with the client hidden and
a single-process view (:func:`hide_during_backend_init`); ours learns the
job from our runtime instead. jax is never imported from here: everything
acts on ``jax._src.distributed`` once it is in ``sys.modules``.

One file (~390 lines) for one job, jax's distributed client served by our
runtime: the Client class and the places jax looks for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Sequence

from jax_plugin import _myplugin, distributed, errors

# jax.distributed.initialize's defaults, as our service's (C++: coordination/defaults.h).
_DEFAULTS = _myplugin.DEFAULTS

_JAX_DISTRIBUTED = "jax._src.distributed"
_JAX_BRIDGE = "jax._src.xla_bridge"
# jax's keys live apart from the ones our runtime uses (Gloo rendezvous...).
_KEY_PREFIX = "jax/"
_BARRIER_PREFIX = "myplugin/jax_barrier/"
# How often a member waiting at a barrier of some processes looks for a
# non-participant's call (which fails the barrier for everyone).
_BARRIER_POLL_S = 0.1

_lock = threading.RLock()
_in_backend_init = 0


def _error(code: str, message: str) -> Exception:
  """An error in jax's words ("CODE: message"), as jax's runtime error type
  (ours: errors.MypluginError), which jax callers catch."""
  return errors.error(code, message)


def _key(key: str | bytes) -> bytes:
  k = key.encode() if isinstance(key, str) else bytes(key)
  return _KEY_PREFIX.encode() + k


def _directory(key: str | bytes) -> bytes:
  k = _key(key)
  return k if k.endswith(b"/") else k + b"/"


class Client:
  """The methods of jaxlib's DistributedRuntimeClient (jax 0.10 and 0.11),
  with its semantics: timeouts in milliseconds, NOT_FOUND / ALREADY_EXISTS /
  DEADLINE_EXCEEDED raised as jax's runtime error, directories as key
  prefixes ending in '/'. It joins the job on first use if the process has
  not joined yet (a job described by MYPLUGIN_* variables joins lazily)."""

  def __init__(self, process_id: int, num_processes: int):
    self._process_id = process_id
    self._num_processes = num_processes
    self._barrier_calls: dict[tuple, int] = {}

  def __repr__(self):
    return f"<myplugin distributed client: process {self._process_id} of {self._num_processes}>"

  def _ready(self) -> None:
    if not distributed.is_initialized() and not distributed.initialize_from_environment():
      raise _error("FAILED_PRECONDITION", "this process has left the myplugin job "
                   "(jax.distributed.shutdown was called)")

  def _call(self, fn, *args):
    self._ready()
    # Our bindings raise errors.MypluginError (jax's runtime error type),
    # typed by what failed.
    return fn(*args)

  # -- lifecycle
  def connect(self) -> None:
    self._ready()

  def shutdown(self) -> None:
    uninstall()
    # A failed job is not shut down but ended (fate-sharing, at exit): jax's
    # own exit hook calls this too, after ours has reported the failure.
    if distributed.is_initialized() and not distributed._uncaught and _myplugin.failure() is None:
      distributed.shutdown()

  # -- key-value store
  def key_value_set_bytes(self, key: str, value: bytes, allow_overwrite: bool = False) -> None:
    # Insert-if-absent is one request, atomic in the service: of two
    # processes racing to create a key, exactly one succeeds.
    if allow_overwrite:
      self._call(_myplugin.kv_set, _key(key), bytes(value))
      return
    try:
      self._call(_myplugin.kv_insert, _key(key), bytes(value))
    except errors.MypluginError as e:
      if e.code != "ALREADY_EXISTS":
        raise
      # In jax's words, with the key as the caller named it.
      raise _error("ALREADY_EXISTS", f"key {key} already exists.") from None

  def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
    self.key_value_set_bytes(key, value.encode() if isinstance(value, str) else value, allow_overwrite)

  def blocking_key_value_get_bytes(self, key: str, timeout_in_ms: int) -> bytes:
    return self._call(_myplugin.kv_get, _key(key), max(0.0, timeout_in_ms / 1000.0))

  def blocking_key_value_get(self, key: str, timeout_in_ms: int) -> str:
    return self.blocking_key_value_get_bytes(key, timeout_in_ms).decode()

  def key_value_try_get_bytes(self, key: str) -> bytes:
    value = self._call(_myplugin.kv_try_get, _key(key))
    if value is None:
      raise _error("NOT_FOUND", f"Config key {key} not found.")
    return value

  def key_value_try_get(self, key: str) -> str:
    return self.key_value_try_get_bytes(key).decode()

  def key_value_dir_get_bytes(self, key: str) -> list[tuple[str, bytes]]:
    skip = len(_KEY_PREFIX)
    return [(k[skip:].decode(), v) for k, v in self._call(_myplugin.kv_list, _directory(key))]

  def key_value_dir_get(self, key: str) -> list[tuple[str, str]]:
    return [(k, v.decode()) for k, v in self.key_value_dir_get_bytes(key)]

  def key_value_delete(self, key: str) -> None:
    """The key and everything under it as a directory, like jax's."""
    self._call(_myplugin.kv_delete, _key(key))
    for k, _ in self._call(_myplugin.kv_list, _directory(key)):
      self._call(_myplugin.kv_delete, k)

  def key_value_increment(self, key: str, increment: int) -> int:
    """Adds to the key's integer value (absent: 0), atomically in the service."""
    return int(self._call(_myplugin.kv_increment, _key(key), int(increment)))

  # -- barriers and liveness
  def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int,
                      process_ids: Sequence[int] | None = None) -> None:
    timeout = max(0.0, timeout_in_ms / 1000.0)
    if process_ids is None or sorted(set(process_ids)) == list(range(self._num_processes)):
      self._call(_myplugin.barrier, _KEY_PREFIX + barrier_id, timeout)
      return
    self._subset_barrier(barrier_id, sorted(set(int(p) for p in process_ids)), timeout)

  def _subset_barrier(self, barrier_id: str, members: list[int], timeout: float) -> None:
    """A barrier of some processes, over the key-value store: each member
    posts its arrival, then waits for the others' (numbered per use, so
    that an id may be used again). As in jax's service, a process outside
    the list that calls it fails the barrier: it gets INVALID_ARGUMENT, and
    so does every member, waiting or yet to come."""
    bad = [p for p in members if not 0 <= p < self._num_processes]
    if bad:
      raise _error("INVALID_ARGUMENT", f"barrier '{barrier_id}': no such processes {bad} "
                   f"(the job has {self._num_processes})")
    group = f"{_BARRIER_PREFIX}{barrier_id}/{','.join(map(str, members))}/"
    failed = (group + "failed").encode()
    if self._process_id not in members:
      # Its code is INVALID_ARGUMENT wherever it is read.
      why = (f"A non-participating task (process {self._process_id}) called barrier "
             f"'{barrier_id}' of processes {members}")
      self._call(_myplugin.kv_set, failed, why.encode())
      raise _error("INVALID_ARGUMENT", why)
    with _lock:
      use = self._barrier_calls.get((barrier_id, tuple(members)), 0)
      self._barrier_calls[(barrier_id, tuple(members))] = use + 1
    base = f"{group}{use}/".encode()
    # Recorded like a barrier of every process (same name as those get), so
    # the straggler report and the flight recorder see it.
    record = _myplugin.flight_recorder_barrier_begin(_KEY_PREFIX + barrier_id, members)
    try:
      self._call(_myplugin.kv_set, base + str(self._process_id).encode(), b"")
      deadline = time.monotonic() + timeout
      for p in members:
        while True:
          why = self._call(_myplugin.kv_try_get, failed)
          if why is not None:
            raise _error("INVALID_ARGUMENT", why.decode())
          left = deadline - time.monotonic()
          try:
            # In slices, so that a non-participant's call is seen while waiting.
            self._call(_myplugin.kv_get, base + str(p).encode(), max(0.0, min(left, _BARRIER_POLL_S)))
            break
          except errors.MypluginError as e:
            if e.code != "DEADLINE_EXCEEDED":
              raise
            if left > _BARRIER_POLL_S:
              continue
          arrived = {int(k.rsplit(b"/", 1)[1]) for k, _ in self._call(_myplugin.kv_list, base)}
          missing = [q for q in members if q not in arrived]
          raise errors.error("DEADLINE_EXCEEDED", f"Barrier timed out: barrier '{barrier_id}' of processes "
                             f"{members} waited {timeout:g} s; processes {missing} did not arrive",
                             cls="CollectiveTimeout", processes=missing, collective=f"barrier '{barrier_id}'") from None
    except BaseException as e:
      _myplugin.flight_recorder_barrier_end(record, False, str(e))
      raise
    _myplugin.flight_recorder_barrier_end(record, True)

  def get_live_nodes(self, process_ids: Sequence[int]) -> dict[int, int]:
    """jax's `live_devices` step: a barrier of the listed processes, then
    each one's incarnation (new when a process was started again and let
    back in by a membership agreement), the same answer on every caller.
    Every listed process is live here: a failed one fails the job (the
    error says which), and the survivors' way on is `recover()`, after
    which the members are the live ones."""
    self._ready()
    members = sorted(set(int(p) for p in process_ids))
    # Per epoch: a barrier of the same ids after a recovery is another one.
    self.wait_at_barrier(f"myplugin/live_nodes/{_myplugin.epoch()}", int(_DEFAULTS["agreement_timeout"] * 1000),
                         members)
    incarnations = _myplugin.member_incarnations()
    return {p: int(incarnations[p]) for p in members}


class backend_init:
  """Marks a stretch of backend creation in which jax's state must not get
  our client (jaxlib's factory reads it right after our options)."""

  def __enter__(self):
    global _in_backend_init
    with _lock:
      _in_backend_init += 1

  def __exit__(self, *exc):
    global _in_backend_init
    with _lock:
      _in_backend_init -= 1


def _jax_state():
  module = sys.modules.get(_JAX_DISTRIBUTED)
  return getattr(module, "global_state", None)


def is_ours(client) -> bool:
  return isinstance(client, Client)


def install(process_id: int, num_processes: int, coordinator_address: str | None) -> None:
  """Puts our client in jax's distributed state, unless jax's own client is
  there (a job of jax's own service, which we leave alone)."""
  state = _jax_state()
  if state is None:
    return
  with _lock:
    hide_during_backend_init()
    if _in_backend_init or (state.client is not None and not is_ours(state.client)):
      return
    if (is_ours(state.client) and state.client._process_id == process_id and
        state.client._num_processes == num_processes):
      return
    state.client = Client(process_id, num_processes)
    state.process_id = process_id
    state.num_processes = num_processes
    state.coordinator_address = coordinator_address
    _install_preemption_sync_manager(state, process_id, num_processes)


def _install_preemption_sync_manager(state, process_id: int, num_processes: int) -> None:
  """multihost_utils.reached_preemption_sync_point asks jax's state for it;
  jax creates one at initialize unless jax_enable_preemption_service is
  off, and so do we."""
  config = getattr(sys.modules.get("jax"), "config", None)
  if getattr(config, "jax_enable_preemption_service", True) is False:
    return
  from jax_plugin import preemption
  previous = getattr(state, "preemption_sync_manager", None)
  if isinstance(previous, preemption.PreemptionSyncManager):
    previous.shutdown()
  timeout = distributed.seconds_setting("MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", "collective_timeout")
  state.preemption_sync_manager = preemption.PreemptionSyncManager(process_id, num_processes, timeout)


def sync() -> None:
  """Installs our client if this process has joined a job (our runtime) or
  is described by the launcher's variables (then it joins on first use)."""
  if _jax_state() is None:
    return
  if _myplugin.distributed_is_initialized():
    install(_myplugin.process_id(), _myplugin.num_processes(), os.environ.get("MYPLUGIN_COORDINATOR_ADDRESS"))
    return
  from jax_plugin import cluster
  try:
    spec = cluster.from_myplugin_env(os.environ)
  except ValueError:
    return  # reported when the backend joins
  # Not joined yet: only a job that myplugin may serve gets our client now.
  if spec is not None and _myplugin_selected():
    install(spec.process_id, spec.num_processes, spec.coordinator_address)


def uninstall() -> None:
  state = _jax_state()
  if state is not None and is_ours(state.client):
    state.client = None
    from jax_plugin import preemption
    manager = getattr(state, "preemption_sync_manager", None)
    if isinstance(manager, preemption.PreemptionSyncManager):
      manager.shutdown()
      state.preemption_sync_manager = None


def hide_during_backend_init() -> None:
  """Wraps xla_bridge._init_backend (once): while any backend is created,
  jax's state shows no client and one process, so that jaxlib's factories
  never receive ours; on the way out our client is (re)installed."""
  bridge = sys.modules.get(_JAX_BRIDGE)
  original = getattr(bridge, "_init_backend", None)
  if original is None or getattr(original, "_myplugin_wrapped", False):
    return

  def _init_backend(platform):
    global _in_backend_init
    state = _jax_state()
    with _lock:
      saved = None
      if state is not None and is_ours(state.client):
        saved = (state.client, state.process_id, state.num_processes)
        state.client, state.process_id, state.num_processes = None, 0, 1
      _in_backend_init += 1
    try:
      return original(platform)
    finally:
      with _lock:
        _in_backend_init -= 1
        if saved is not None and state.client is None:
          state.client, state.process_id, state.num_processes = saved
      sync()

  _init_backend._myplugin_wrapped = True
  bridge._init_backend = _init_backend


def _myplugin_selected() -> bool:
  """jax.distributed is ours to serve when myplugin may be a backend:
  JAX_PLATFORMS unset (myplugin outranks cpu) or naming it. A job of jax's
  own backends alone (JAX_PLATFORMS=cpu, say) keeps jax's service."""
  config = sys.modules.get("jax._src.config")
  platforms = getattr(getattr(config, "jax_platforms", None), "value", None)
  if platforms is None:
    platforms = os.environ.get("JAX_PLATFORMS", "")
  platforms = [p.strip() for p in (platforms or "").split(",") if p.strip()]
  return not platforms or "myplugin" in platforms


def patch_jax_distributed() -> None:
  """Makes jax.distributed.initialize/shutdown start and stop our service
  (once jax._src.distributed is imported; called by the startup hook)."""
  module = sys.modules.get(_JAX_DISTRIBUTED)
  state = getattr(module, "global_state", None)
  if state is None or getattr(state, "_myplugin_patched", False):
    return
  jax_initialize, jax_shutdown = state.initialize, state.shutdown

  def initialize(coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None,
                 cluster_detection_method=None, initialization_timeout=_DEFAULTS["initialization_timeout"],
                 coordinator_bind_address=None, heartbeat_timeout_seconds=_DEFAULTS["heartbeat_timeout"],
                 shutdown_timeout_seconds=_DEFAULTS["shutdown_timeout"], partition_index=None, **more):
    args = (coordinator_address, num_processes, process_id, local_device_ids, cluster_detection_method,
            initialization_timeout, coordinator_bind_address)
    kwargs = dict(heartbeat_timeout_seconds=heartbeat_timeout_seconds,
                  shutdown_timeout_seconds=shutdown_timeout_seconds, partition_index=partition_index, **more)
    # mTLS (jax 0.11) is jax's service's alone: that job keeps it.
    if not _myplugin_selected() or any(v is not None for v in more.values()):
      if is_ours(state.client) and not _myplugin.distributed_is_initialized():
        state.client = None  # installed for a job that jax's own service now runs
      return jax_initialize(*args, **kwargs)
    _initialize_for_jax(state, module, *args, heartbeat_timeout_seconds, partition_index)

  def shutdown():
    if is_ours(state.client):
      client, state.client = state.client, None
      state.explicitly_initialized = False
      client.shutdown()
      return
    return jax_shutdown()

  state.initialize, state.shutdown = initialize, shutdown
  state._myplugin_patched = True


def _initialize_for_jax(state, module, coordinator_address, num_processes, process_id, local_device_ids,
                        cluster_detection_method, initialization_timeout, coordinator_bind_address,
                        heartbeat_timeout_seconds, partition_index) -> None:
  from jax_plugin import cluster
  if getattr(state, "explicitly_initialized", False):
    raise RuntimeError("distributed.initialize should only be called once.")
  # A Kubernetes indexed Job is ours too: jax would look for the Kubernetes API.
  launcher = cluster.from_myplugin_env(os.environ) or cluster.from_kubernetes(os.environ)
  if launcher is not None:
    # The job is the launcher's (or the MYPLUGIN_* variables'): its service
    # is already running. Arguments may only restate it.
    for name, given, ours in (("num_processes", num_processes, launcher.num_processes),
                              ("process_id", process_id, launcher.process_id)):
      if given is not None and int(given) != ours:
        raise ValueError(f"jax.distributed.initialize({name}={given}) contradicts the myplugin job this process "
                         f"belongs to ({name}={ours}, from MYPLUGIN_* variables / myplugin-run)")
    if not distributed.is_initialized():
      distributed.initialize_from_environment()
  elif not distributed.is_initialized():
    coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if isinstance(local_device_ids, int):
      local_device_ids = [local_device_ids]
    if local_device_ids is None and os.environ.get("JAX_LOCAL_DEVICE_IDS"):
      local_device_ids = [int(i) for i in os.environ["JAX_LOCAL_DEVICE_IDS"].split(",")]
    if cluster_detection_method != "deactivate" and None in (coordinator_address, num_processes, process_id):
      # jax's own detection (Slurm, Open MPI, mpi4py, ...), with jax's meaning.
      clusters = sys.modules.get("jax._src.clusters") or getattr(module, "clusters")
      coordinator_address, num_processes, process_id, local_device_ids = (
          clusters.ClusterEnv.auto_detect_unset_distributed_params(
              coordinator_address, num_processes, process_id, local_device_ids, cluster_detection_method,
              initialization_timeout))
    if coordinator_address is None:
      raise ValueError("coordinator_address should be defined.")
    if num_processes is None:
      raise ValueError("Number of processes must be defined.")
    if process_id is None:
      raise ValueError("The process id of the current process must be defined.")
    coordinator_bind_address = coordinator_bind_address or os.environ.get("JAX_COORDINATOR_BIND_ADDRESS")
    distributed._initialize(coordinator_address, int(num_processes), int(process_id), local_device_ids, None,
                            initialization_timeout, heartbeat_timeout_seconds, coordinator_bind_address, True,
                            unauthenticated_ok=True)
  install(_myplugin.process_id(), _myplugin.num_processes(), coordinator_address or
          (launcher.coordinator_address if launcher else None))
  state.partition_index = partition_index
  state.explicitly_initialized = True


# Registered once, when jax_client is first imported: by the startup hook as
# jax._src.distributed loads, or by registration when our backend is made.
distributed.add_listener(sync, uninstall)

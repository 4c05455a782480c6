"""A Slurm cluster for tests: munged and slurmctld on the first host of a
Cluster, one slurmd per node host (network namespaces named node0, node1,
… through an /etc/hosts that every daemon and job sees, as DNS would serve
them), with a generated slurm.conf in a temporary directory. Each node
offers 4 CPUs (more than this machine has: `SlurmdParameters=
config_overrides` lets slurmd believe the configuration), so two 4-task
jobs run at once on two nodes. `close()` stops every daemon and every job
process."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from cluster.hosts import Cluster, Host

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue")
PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib/slurm-wlm",
               "/usr/lib64/slurm")


def refusal() -> str | None:
  missing = [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]
  if missing:
    return f"not installed: {', '.join(missing)} (Debian packages slurm-wlm and munge)"
  if not any(os.path.isdir(d) for d in PLUGIN_DIRS):
    return f"no Slurm plugin directory among {PLUGIN_DIRS}"
  return None


def _which(name: str) -> str:
  return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:

  def __init__(self, cluster: Cluster, nodes: list[Host], workdir: str, cpus: int = 4):
    self.cluster, self.host, self.nodes, self.dir = cluster, nodes[0], nodes, workdir
    self.names = [f"node{i}" for i in range(len(nodes))]
    self.daemons: list[subprocess.Popen] = []
    for sub in ("state", "spool", "log"):
      os.makedirs(os.path.join(workdir, sub), exist_ok=True)
    self.conf = os.path.join(workdir, "slurm.conf")
    self.hosts_file = os.path.join(workdir, "hosts")
    self.munge_socket = os.path.join(workdir, "munge.sock")
    plugin_dir = next(d for d in PLUGIN_DIRS if os.path.isdir(d))
    d = workdir
    controller = socket.gethostname()  # slurmctld checks that it runs on SlurmctldHost
    with open(self.hosts_file, "w") as f:
      f.write("127.0.0.1 localhost\n" + "".join(f"{h.ipv4} {n}\n" for n, h in zip(self.names, nodes)))
    node_lines = "".join(f"NodeName={n} NodeAddr={h.ipv4} CPUs={cpus} State=UNKNOWN\n"
                         for n, h in zip(self.names, nodes))
    with open(self.conf, "w") as f:
      f.write(f"""ClusterName=myplugintest
SlurmctldHost={controller}({self.host.ipv4})
SlurmctldPort=36817
SlurmdPort=36818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
PluginDir={plugin_dir}
{node_lines}PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=YES
""")
    try:
      key = os.path.join(d, "munge.key")
      subprocess.run([_which("mungekey"), "-c", "-k", key, "-b", "1024", "-f"], check=True, capture_output=True,
                     timeout=30)
      os.chmod(key, 0o600)
      # Foreground daemons (-F / -D): they are our children, and killing
      # them is all it takes to stop them.
      self._daemon(self.host, [_which("munged"), "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={d}/munged.pid", f"--log-file={d}/log/munged.log",
                               f"--seed-file={d}/munge.seed", "--force"], "munged")
      self._wait_for(lambda: os.path.exists(self.munge_socket), "munged's socket", 15)
      self._daemon(self.host, [_which("slurmctld"), "-D", "-c", "-f", self.conf], "slurmctld")
      for name, h in zip(self.names, nodes):
        os.makedirs(os.path.join(d, "spool", name), exist_ok=True)
        self._daemon(h, [_which("slurmd"), "-D", "-N", name, "-f", self.conf], f"slurmd.{name}")
      self._wait_for(self._nodes_idle, "every node to be idle in sinfo", 30)
    except BaseException:
      self.close()
      raise

  def env(self, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MYPLUGIN_"))}
    e.update(SLURM_CONF=self.conf, **extra)
    return e

  def _daemon(self, host: Host, argv: list[str], name: str) -> None:
    log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
    self.daemons.append(self.cluster.popen(host, argv, self.env(), hosts_file=self.hosts_file, stdout=log,
                                           stderr=subprocess.STDOUT))
    log.close()

  def _nodes_idle(self) -> bool:
    r = self.run(["sinfo", "-h", "-N", "-o", "%t"], timeout=10)
    return r.returncode == 0 and r.stdout.split() == ["idle"] * len(self.nodes)

  def _wait_for(self, ready, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      for p in self.daemons:
        if p.poll() is not None:
          raise RuntimeError(f"a Slurm daemon exited ({' '.join(p.args[-4:])}: {p.returncode}) while waiting for "
                             f"{what}:\n{self.logs()}")
      if ready():
        return
      time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

  def logs(self) -> str:
    out = []
    log_dir = os.path.join(self.dir, "log")
    for name in sorted(os.listdir(log_dir)):
      with open(os.path.join(log_dir, name), errors="replace") as f:
        out.append(f"--- {name} ---\n" + f.read()[-3000:])
    return "\n".join(out)

  def popen(self, argv: list[str], env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    """A Slurm client command (srun, sbatch) on the controller's host."""
    return self.cluster.popen(self.host, argv, env or self.env(), hosts_file=self.hosts_file, **kw)

  def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120,
          cwd: str | None = None) -> subprocess.CompletedProcess:
    p = self.popen(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
      out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      self.cluster.kill_processes()
      raise AssertionError(f"{' '.join(argv)} did not finish in {timeout} s\n{self.logs()}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)

  def close(self) -> None:
    # Jobs first (scancel would need the daemons), then the daemons: all
    # are processes of the Slurm host, which Cluster.kill_processes clears.
    self.cluster.kill_processes()
    self.daemons = []

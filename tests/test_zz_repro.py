import os, pytest
from cluster.hosts import Cluster
from cluster.job import ClusterJob
N = int(os.environ.get("ITERS", "20"))
@pytest.mark.parametrize("degrade", [True])
def test_repro(tmp_path, degrade):
  with Cluster(2) as c:
    if degrade:
      for h in c.hosts: c.degrade(h, loss=0.02, rate="200mbit")
    with ClusterJob(c, c.hosts, [os.environ.get("WORKER","/tmp/rp/cross_worker.py"), str(N)], tmp_path, devices=2, port=29581, heartbeat=3.0) as job:
      job.wait(600)
      out = job.all_output()
      print(out[-3000:])
      assert job.returncodes() == [0, 0], out
      assert "ok=False" not in out

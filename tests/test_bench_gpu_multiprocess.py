"""bench/gpu_multiprocess.py without a GPU: its dry run (myplugin's CPU engine
against jax's CPU backend, both started in multi-process mode as on a GPU)
gives both backends' rows with sane numbers and the same training loss; when
jax's job cannot start in several processes, the error is reported and jax
is measured in one process; the GPU-sharing variables; bad arguments."""
import importlib.util
import json
import math
import os
import sys

from proc import child_env, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench", "gpu_multiprocess.py")
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]  # the dry run's psum sizes
LABELS = ["4 KB", "16 KB", "64 KB", "256 KB", "1 MB"]


def bench(*args, env=None, timeout=150):
  return run([sys.executable, BENCH, *args], env or child_env(), timeout=timeout)


def load_bench():
  sys.path.insert(0, os.path.join(ROOT, "bench"))  # its procs.py
  spec = importlib.util.spec_from_file_location("bench_gpu_multiprocess", BENCH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def table_rows(output: str, first_cell: str) -> list[list[str]]:
  return [[c.strip() for c in line.strip("|").split("|")] for line in output.splitlines()
          if line.startswith(f"| {first_cell}")]


def test_dry_run_measures_both_backends_in_multiprocess_mode(tmp_path):
  r = bench("--dry-run", "--json", str(tmp_path / "out.json"), "--profile", str(tmp_path / "profiles"))
  assert r.returncode == 0, r.output
  out = r.stdout
  # Both jobs ran as jobs of 2 processes, on the platform each was meant for.
  assert "myplugin: platform myplugin, 2 x cpu" in out, out
  assert "jax: platform cpu, 2 x cpu" in out, out
  rows = {row[0]: row for row in table_rows(out, "") if row[0] in LABELS}
  assert sorted(rows, key=LABELS.index) == LABELS, out
  for label in LABELS:
    mine, theirs = rows[label][1], rows[label][2]
    assert "/" in mine and "/" in theirs and "not run" not in theirs, rows[label]
  assert len(table_rows(out, "step time")) == 1, out
  assert "GOAL step time <= 1.05 x jax's (2 processes):" in out, out
  assert "GOAL busbw >= 0.95 x jax's from 1 MB (2 processes): worst" in out, out
  # The FSDP step on both, and its profiles taken (on CPUs: no GPU plane to read).
  assert "GOAL FSDP step time <= 1.05 x jax's (2 processes):" in out, out
  for backend in ("myplugin", "jax"):
    assert f"{backend}'s FSDP profile (process 0): no GPU plane in the profile" in out, out
    assert list((tmp_path / "profiles" / f"{backend}-2" / "process-0").glob("plugins/profile/*/*.xplane.pb"))

  summary = json.loads((tmp_path / "out.json").read_text())
  assert summary["platforms"] == ["myplugin", "cpu"] and summary["rounds"] == 2
  (run2,) = summary["runs"]
  assert run2["processes"] == 2 and run2["fallback"] is None and run2["errors"] == {}
  assert [row["bytes"] for row in run2["psum"]] == SIZES
  for row in run2["psum"]:
    for backend in ("myplugin", "jax"):
      best, median = row[backend]
      assert 0 < best <= median < 10, (row, backend)  # seconds per psum of at most 1 MB
  for backend in ("myplugin", "jax"):
    best, median = run2["step"][backend]
    assert 0 < best <= median < 10, (backend, run2["step"])
  ratio, at = run2["busbw_worst_ratio"]
  assert at >= 1 << 20 and math.isfinite(ratio) and ratio > 0
  assert math.isclose(run2["step_ratio"], run2["step"]["myplugin"][1] / run2["step"]["jax"][1])
  for backend in ("myplugin", "jax"):
    best, median = run2["fsdp"][backend]
    assert 0 < best <= median < 10, (backend, run2["fsdp"])
  # The same training step on both: the same first loss (jax's CPU backend is the reference).
  assert math.isclose(run2["loss"]["myplugin"], run2["loss"]["jax"], rel_tol=1e-5), run2["loss"]
  assert 0 < run2["loss"]["jax"] < 10


def test_jax_that_cannot_share_is_reported_and_measured_in_one_process(tmp_path):
  # jax's job refuses to start in several processes (as it might on one GPU):
  # a sitecustomize that ends jax's workers of a 2-process job at start.
  (tmp_path / "sitecustomize.py").write_text(
      "import os, sys\n"
      "if os.environ.get('BENCH_BACKEND') == 'jax' and os.environ.get('BENCH_NUM_PROCESSES', '1') != '1':\n"
      "  sys.stderr.write('RuntimeError: simulated: no two processes on one device\\n')\n"
      "  os._exit(1)\n")
  env = child_env(PYTHONPATH=str(tmp_path))
  r = bench("--dry-run", "--rounds", "1", "--json", str(tmp_path / "out.json"), env=env)
  assert r.returncode == 0, r.output
  out = r.stdout
  assert "jax's cpu backend could not run 2 processes sharing one device" in out, out
  assert "first error line: RuntimeError: simulated: no two processes on one device" in out, out
  assert "jax: platform cpu, 1 x cpu" in out, out
  rows = [row for row in table_rows(out, "") if row[0] in LABELS]
  assert [row[0] for row in rows] == LABELS and all(row[2] == "not run" for row in rows), out
  (step,) = table_rows(out, "step time")
  assert step[2].endswith("(1 process)"), step
  assert "(against jax in one process: not the same job)" in out, out
  assert "not measured (jax's psum did not run)" in out, out
  (run1,) = json.loads((tmp_path / "out.json").read_text())["runs"]
  assert run1["fallback"] and "simulated: no two processes" in run1["errors"]["jax"]
  assert math.isclose(run1["loss"]["myplugin"], run1["loss"]["jax"], rel_tol=1e-5), run1["loss"]


def test_bad_arguments_are_refused_naming_them():
  r = bench("--processes", "1,2")
  assert r.returncode == 2 and "--processes: each count must be at least 2" in r.stderr, r.stderr
  r = bench("--platforms", "myplugin,rocm")
  assert r.returncode == 2 and "expected myplugin,cuda or myplugin,cpu" in r.stderr, r.stderr
  r = bench("--processes", "two")
  assert r.returncode == 2 and "expected comma-separated integers" in r.stderr, r.stderr
  r = bench("--min-bytes", "8", "--max-bytes", "4")
  assert r.returncode == 2 and "--min-bytes and --max-bytes" in r.stderr, r.stderr

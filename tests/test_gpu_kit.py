"""The parts of the GPU tests and of ci/gpu_tests.sh that need no GPU: the
GPU tests' programs run here on jax's CPU backend and on myplugin's CPU
engine, their checks pass there and fail on a wrong number, and the kit
script refuses bad arguments clearly."""
import json
import os
import sys

import numpy as np

from proc import child_env, run, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_TESTS = os.path.join(ROOT, "tests", "gpu")
sys.path.insert(0, GPU_TESTS)
import numerics  # noqa: E402
import test_gpu_single as single  # noqa: E402


def test_numerics_program_and_checks_on_the_cpu(tmp_path):
  for platform in ("cpu", "myplugin"):
    r = run_python([os.path.join(GPU_TESTS, "numerics.py"), str(tmp_path / f"{platform}.npz")],
                   child_env(JAX_PLATFORMS=platform), timeout=180)
    assert r.returncode == 0, r.output
  cpu, ours = np.load(tmp_path / "cpu.npz"), np.load(tmp_path / "myplugin.npz")
  assert str(ours["platform"]) == "myplugin"
  assert numerics.check_against_numpy(cpu) == []
  assert numerics.check_against_numpy(ours) == []
  assert numerics.check_against_each_other(ours, cpu) == []
  # The checks can fail: one wrong element, one dtype's worth of error too much.
  wrong = dict(ours)
  wrong["solve"] = ours["solve"].copy()
  wrong["solve"][3] += 0.1 * np.abs(ours["solve"]).max()
  wrong["matmul_bfloat16"] = ours["matmul_bfloat16"] * (1 + 2 * numerics.RTOL["bfloat16"])
  wrong["random_bits"] = ours["random_bits"] ^ np.uint32(1)
  assert [p.split(":")[0] for p in numerics.check_against_numpy(wrong)] == ["solve", "matmul_bfloat16"]
  assert [p.split(":")[0] for p in numerics.check_against_each_other(wrong, cpu)] == [
      "random_bits differ", "solve", "matmul_bfloat16"]


def test_seed_and_nccl_programs_of_the_gpu_tests_run_on_the_cpu_engine(tmp_path):
  program = tmp_path / "seeds.py"
  program.write_text(single.SEEDS_ON_ONE_DEVICE)
  for platform in ("cpu", "myplugin"):
    r = run_python([str(program), str(tmp_path / f"{platform}.npz")], child_env(JAX_PLATFORMS=platform), timeout=180)
    assert r.returncode == 0, r.output
  want, got = np.load(tmp_path / "cpu.npz"), np.load(tmp_path / "myplugin.npz")
  assert sorted(want.files) == ["constraint", "pmap_psum", "shard_map_psum", "sharded_jit"]
  for key in want.files:
    np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
  # The FFI handlers over a group of one (Gloo here, NCCL on a GPU).
  r = run_python(["-c", single.NCCL_DEVICE_GROUP_OF_ONE], child_env(JAX_PLATFORMS="myplugin"), timeout=180)
  assert r.returncode == 0, r.output
  want = (np.arange(64, dtype=np.float32) - 20.0).tolist()
  assert single.last_json(r) == {"all_reduce": want, "all_gather": want, "psum": want}


def test_soak_program_measures_memory_on_the_cpu():
  r = run_python(["-c", single.SOAK.replace("range(1000)", "range(20)")], child_env(JAX_PLATFORMS="cpu"), timeout=180)
  assert r.returncode == 0, r.output
  before, after, finite = json.loads(r.stdout.strip().splitlines()[-1])
  assert finite  # jax's CPU backend may report no memory stats: the GPU test then fails with its reason


def kit(*args, **env):
  return run(["bash", os.path.join(ROOT, "ci", "gpu_tests.sh"), *args], dict(os.environ, **env), timeout=60,
                  cwd=ROOT)


def test_kit_script_refuses_bad_arguments(tmp_path):
  r = kit("--offline", str(tmp_path / "no-kit"), "--out", str(tmp_path / "out"))
  assert r.returncode == 2 and "no kit at" in r.stderr and "--prepare" in r.stderr, r.stderr
  r = kit("--cuda", "11", "--dry-run")
  assert r.returncode == 2 and "--cuda must be 12 or 13, not '11'" in r.stderr, r.stderr
  r = kit("--prepare", str(tmp_path / "kit"), PYTHON312=str(tmp_path / "python3.12"))
  assert r.returncode == 2 and "needs Python 3.12" in r.stderr, r.stderr
  assert not (tmp_path / "kit").exists()
  # A folder of something else is never wiped.
  (tmp_path / "precious").mkdir()
  (tmp_path / "precious" / "notes.txt").write_text("keep")
  r = kit("--prepare", str(tmp_path / "precious"), PYTHON312=sys.executable)
  assert r.returncode == 2 and "is not a kit" in r.stderr, r.stderr
  assert (tmp_path / "precious" / "notes.txt").read_text() == "keep"
  # The collectives part: --part and --bench-args only where they mean something.
  r = kit("--offline", str(tmp_path / "no-kit"), "--part", "nccl")
  assert r.returncode == 2 and "--part must be gpu, collectives, multiprocess, fsdp, jax-tests or scale, not 'nccl'" in r.stderr, r.stderr
  r = kit("--part", "multiprocess", "--dry-run")
  assert r.returncode == 2 and "--part goes with --offline" in r.stderr, r.stderr
  # A kit of an older gpu_tests.sh: the multiprocess part says what it lacks.
  (tmp_path / "old-kit").mkdir()
  r = kit("--offline", str(tmp_path / "old-kit"), "--part", "multiprocess", "--out", str(tmp_path / "out"))
  assert r.returncode == 1 and "the kit has no engine/" in r.stdout, r.output
  assert "the kit has no engine/" in (tmp_path / "out" / "summary.txt").read_text()
  r = kit("--offline", str(tmp_path / "old-kit"), "--part", "scale", "--out", str(tmp_path / "out-scale"))
  assert r.returncode == 1 and "the kit has no bin/coordination_scale" in r.stdout, r.output
  r = kit("--part", "collectives", "--dry-run")
  assert r.returncode == 2 and "--part goes with --offline" in r.stderr, r.stderr
  r = kit("--offline", str(tmp_path / "no-kit"), "--bench-args", "--rounds 1")
  assert r.returncode == 2 and "--bench-args goes with --part collectives" in r.stderr, r.stderr


def load_bench():
  import importlib.util
  sys.path.insert(0, os.path.join(ROOT, "bench"))  # its procs.py
  spec = importlib.util.spec_from_file_location("bench_collectives", os.path.join(ROOT, "bench", "collectives.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def bench(*args):
  return run([sys.executable, os.path.join(ROOT, "bench", "collectives.py"), *args], dict(os.environ), timeout=60)


def test_collectives_bench_arguments_and_goal_line(tmp_path):
  # The kit's command line, planned: 2 process counts x 3 rounds x 3 kinds x 8 sizes (4 KB..64 MB).
  r = bench("--processes", "2,4", "--rounds", "3", "--max-mb", "64", "--raw-gloo", str(tmp_path / "rg"), "--plan")
  assert r.returncode == 0, r.output
  assert "= 144 jobs" in r.stdout and "4 KB to 64 MB" in r.stdout and "not there yet" in r.stdout, r.stdout
  r = bench("--raw-gloo", str(tmp_path / "rg"))
  assert r.returncode == 2 and "not an executable file" in r.stderr, r.stderr
  r = bench("--processes", "1,4")
  assert r.returncode == 2 and "at least 2 processes" in r.stderr, r.stderr
  collectives = load_bench()
  # A 2-process run the README once gave (5.19x at 64 MB, 39.7 % of memcpy, 11 us): the share misses 40 %.
  line = collectives.goal(2, {1 << 20: 10.19, 64 << 20: 5.19}, 0.397, 11e-6)
  assert "5.19x at worst (64 MB), met" in line and "39.7%, NOT met" in line and "11 us, met" in line, line
  line = collectives.goal(4, {4 << 20: 3.64, 64 << 20: 2.98}, 0.139, 46e-6)
  assert "2.98x at worst (64 MB), NOT met" in line and "46 us, NOT met" in line, line


# Issue 39's processes sharing one GPU (tests/gpu/test_nccl_shared_gpu.py):
# the same programs and checks on the CPU engine, 2 processes of one device.
import shared_gpu  # noqa: E402



def test_shared_gpu_collectives_and_their_checks_on_the_cpu_engine(tmp_path):
  # every_collective.py alone (its pmap emits each of the five calls); the
  # shard_map example runs on 2 processes in tests/test_multiprocess_programs.py.
  shared_gpu.check_collectives(2, str(tmp_path), programs=("every_collective",))
  # The checks fail on one wrong element, a missing block, a missing collective call.
  want = dict(np.load(tmp_path / "every_collective-cpu-2.npz"))
  got = {rank: dict(np.load(tmp_path / f"every_collective-2.{rank}.npz")) for rank in range(2)}
  assert shared_gpu.compare_blocks(got, want) == []
  got[1]["jit_contract_sharded.1"] = got[1]["jit_contract_sharded.1"].copy()
  got[1]["jit_contract_sharded.1"].flat[3] += 0.5
  del got[0]["pmap_all_to_all.0"]
  assert shared_gpu.compare_blocks(got, want) == ["rank 1: jit_contract_sharded.1 differs by 0.5",
                                                  "pmap_all_to_all.0: no rank holds it"]
  got[1]["jit_contract_sharded.1"].flat[3] -= 0.5 - 2 * shared_gpu.TOLERANCE * np.abs(want["jit_contract_sharded.1"]).max()
  assert [p.split(" differs")[0] for p in shared_gpu.compare_blocks(got, want)][:1] == ["rank 1: jit_contract_sharded.1"]
  calls = shared_gpu.rewritten_calls(str(tmp_path / "dump-2"), "")
  assert len(calls) >= 2 and all(shared_gpu.COLLECTIVE_TARGETS <= set(c) for c in calls), calls
  assert shared_gpu.rewritten_calls(str(tmp_path / "dump-2"), "no_such_module") == [{}] * len(calls)


def test_shared_gpu_pallas_program_on_the_cpu_engine(tmp_path):
  # Interpret mode here (the CPU engine compiles no kernel); Triton on the GPU.
  shared_gpu.check_pallas(2, str(tmp_path))
  want = dict(np.load(tmp_path / "pallas-cpu-2.npz"))
  got = {rank: dict(np.load(tmp_path / f"pallas-2.{rank}.npz")) for rank in range(2)}
  assert sorted(k for blocks in got.values() for k in blocks) == sorted(want)
  got[0]["psum.0"] = got[0]["psum.0"] + 0.5
  assert [p.split(" differs")[0] for p in shared_gpu.compare_blocks(got, want)] == ["rank 0: psum.0"]


def test_shared_gpu_training_step_on_the_cpu_engine(tmp_path):
  shared_gpu.check_training(2, str(tmp_path))
  text = "[0] step   0  loss 0.5\n[1] step   0  loss 0.25\n"
  assert shared_gpu.losses(text, 1) == [0.25] and shared_gpu.losses("step   3  loss 1.5") == [1.5]


def test_shared_gpu_pipeline_on_the_cpu_engine(tmp_path):
  shared_gpu.check_pipeline(str(tmp_path))
  shared_gpu.check_send_then_collective()


def test_shared_gpu_faults_on_the_cpu_engine(tmp_path):
  """The four fault jobs at once (independent jobs; each check has its deadlines)."""
  import concurrent.futures
  checks = [lambda: shared_gpu.check_sigkill(2),
            lambda: shared_gpu.check_mismatch(2, str(tmp_path / "mismatch")),
            lambda: shared_gpu.check_sigstop(2, str(tmp_path / "sigstop")),
            lambda: shared_gpu.check_recovery(2)]
  (tmp_path / "mismatch").mkdir()
  (tmp_path / "sigstop").mkdir()
  with concurrent.futures.ThreadPoolExecutor(len(checks)) as pool:
    for done in [pool.submit(check) for check in checks]:
      done.result()


def test_multiprocess_aot_references_on_the_cpu(tmp_path):
  """The 1x2x1 executables' programs on jax's CPU backend with 2 devices,
  as --prepare makes their references; the check of such executables in a
  2-process job; process counts of topologies."""
  program = os.path.join(ROOT, "tests", "programs", "gpu_aot_artifacts.py")
  r = run_python([program, "reference", str(tmp_path / "ref.pkl"), "--processes", "2"],
                 child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"), timeout=180)
  assert r.returncode == 0, r.output
  import pickle
  with open(tmp_path / "ref.pkl", "rb") as f:
    want = pickle.load(f)
  v = np.asarray((np.arange(16, dtype=np.float32).reshape(2, 8) * 7 % 11) - 5)
  psum, gathered, scattered, permuted, _ = want["collectives"]
  np.testing.assert_array_equal(psum, np.concatenate([v.sum(0, keepdims=True)] * 2))
  np.testing.assert_array_equal(gathered, np.concatenate([v] * 2))
  np.testing.assert_array_equal(permuted, v[::-1])
  assert scattered.shape == (2, 4) and len(want["train_step"]) == 5
  # check's multi-process path in a 2-process job of the CPU engine: the
  # programs compiled and serialized there load and match, and one wrong
  # reference value fails.
  r = shared_gpu.launch(2, program, "selftest", str(tmp_path / "here"), "--reference", str(tmp_path / "ref.pkl"))
  assert r.returncode == 0, r.output
  assert "SELFTEST check on the right values: 0; with one output off by 1: 1" in r.stdout, r.output
  assert r.stdout.count("ok   collectives-here-1x2x1.pkl") == 2 and "FAIL collectives-here-1x2x1.pkl" in r.stdout
  r = run_python([program, "build", str(tmp_path / "aot"), "--topologies", "1x2x2"], child_env(), timeout=60)
  assert r.returncode != 0 and "only one GPU per process" in r.output, r.output


# --part jax-tests: jax's own test files on myplugin and a jax backend side
# by side. jax's tests are not in its wheel (nor in CI), so the dry run
# here runs the kit's part on stand-ins written in jax's harness, as jax's
# files are: the device tag from --jax_test_dut, a helper that jax's wheel
# lacks served from the kit's jax-src, and one test that only jax's own
# backend passes (the share must miss it).
STANDIN_TEST = '''
import os
import time

from absl.testing import absltest
import jax
import numpy as np
from jax._src import config
from jax._src import test_util as jtu
from jax._src import kit_standin_helper  # only in the kit's jax-src, as pallas_test_util

config.parse_flags_with_absl()


class StandinTest(jtu.JaxTestCase):

  @jtu.run_on_devices("cpu")
  def test_runs_where_the_harness_is_told_cpu(self):
    self.assertAllClose(jax.jit(lambda x: x * 2)(np.arange(4.0)), np.arange(4.0) * 2)

  def test_helper_left_out_of_the_wheel(self):
    self.assertEqual(kit_standin_helper.ANSWER, 42)

  def test_passes_on_jax_cpu_only(self):
    self.assertEqual(jax.devices()[0].platform, "cpu")

  def test_not_selected(self):
    raise AssertionError("-k leaves this one out")

  def test_waits_on_myplugin(self):
    if jax.devices()[0].platform == "myplugin" and os.environ.get("STANDIN_HANG"):
      time.sleep(120)


if __name__ == "__main__":
  absltest.main(testLoader=jtu.JaxTestLoader())
'''


# Told the device is a GPU, jax's harness asks for the "gpu" backend's
# devices (the compute capability): on myplugin alone, its devices.
GPU_ALIAS_TEST = '''
from absl.testing import absltest
import jax
from jax._src import config
from jax._src import test_util as jtu
from jax._src import xla_bridge

config.parse_flags_with_absl()


class GpuAliasTest(jtu.JaxTestCase):

  def test_harness_finds_the_device_under_test(self):
    self.assertTrue(jtu.test_device_matches(["gpu"]))
    self.assertEqual(xla_bridge.local_devices(backend="gpu"), jax.local_devices())
'''


def gpu_alias_run(path):
  (path / "tests").mkdir(parents=True)
  (path / "tests" / "alias_test.py").write_text(GPU_ALIAS_TEST)
  return run([sys.executable, os.path.join(ROOT, "ci", "jax_tests.py"), "--python", sys.executable, "--tests",
              str(path / "tests"), "--files", "alias_test.py", "--dut", "gpu", "--out", str(path / "out")],
             dict(os.environ), timeout=150)


def jax_tests_kit(path, deadline):
  """A kit holding only jax-tests/: one file (in a folder, as pallas/), its helper, the selection."""
  (path / "jax-tests" / "tests" / "sub").mkdir(parents=True)
  (path / "jax-tests" / "tests" / "sub" / "standin_test.py").write_text(STANDIN_TEST)
  helper = path / "jax-tests" / "jax-src" / "jax" / "_src" / "kit_standin_helper.py"
  helper.parent.mkdir(parents=True)
  helper.write_text("ANSWER = 42\n")
  selection = {"gpu": [], "dry-run": [["sub/standin_test.py", "not test_not_selected", deadline]],
               "generated_cases": 2}
  (path / "jax-tests" / "selection.json").write_text(json.dumps(selection))
  return path


def jax_tests_part(kit_dir, out, **env):
  env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], **env)
  return run(["bash", os.path.join(ROOT, "ci", "gpu_tests.sh"), "--offline", str(kit_dir), "--part", "jax-tests",
              "--dry-run", "--out", str(out)], env, timeout=150, cwd=ROOT)


def check_shares(path):
  sys.path.insert(0, os.path.join(ROOT, "ci"))
  import jax_tests
  return jax_tests.check_shares(path, ["sub/standin_test.py"])


def test_jax_tests_part_on_the_cpu(tmp_path):
  """Two kits at once (independent jobs, each with its deadlines): one
  records its shares, the other's myplugin run hangs past its deadline;
  and the driver told the device is a GPU."""
  import concurrent.futures
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    good = pool.submit(jax_tests_part, jax_tests_kit(tmp_path / "kit", 90), tmp_path / "out")
    hung = pool.submit(jax_tests_part, jax_tests_kit(tmp_path / "hung-kit", 30), tmp_path / "hung-out",
                       STANDIN_HANG="1")
    alias = pool.submit(gpu_alias_run, tmp_path / "alias")
    good, hung, alias = good.result(), hung.result(), alias.result()
  assert alias.returncode == 0 and "alias_test.py: 1/1 " in alias.stdout, alias.output
  r = good
  assert r.returncode == 0, r.output
  assert sorted(os.listdir(tmp_path / "out")) == ["environment.txt", "jax-tests-runs.tar.gz", "jax-tests.json",
                                                  "jax-tests.log", "jax-tests.md", "summary.txt"]
  shares = json.loads((tmp_path / "out" / "jax-tests.json").read_text())
  assert (shares["reference"], shares["dut"], shares["subset"]) == ("cpu", "cpu", "dry-run")
  [result] = shares["files"]
  # Side by side: 4 selected on each; jax's CPU passes all, myplugin all but
  # the one that asks for jax's own platform.
  assert result["reference"] == {"passed": 4, "failed": 0, "skipped": 0}, result
  assert result["myplugin"] == {"passed": 3, "failed": 1, "skipped": 0}, result
  assert (result["myplugin_passes"], result["reference_passes"]) == (3, 4)
  assert list(result["misses"]) == ["sub.standin_test.StandinTest::test_passes_on_jax_cpu_only"], result
  assert check_shares(tmp_path / "out" / "jax-tests.json") == []
  table = (tmp_path / "out" / "jax-tests.md").read_text()
  assert "| `sub/standin_test.py` (`not test_not_selected`) | 3/4 | 3, 1, 0 | 4, 0, 0 |" in table, table
  assert "3/4" in (tmp_path / "out" / "summary.txt").read_text()
  # The check fails on a shares file that is wrong or incomplete.
  broken = dict(shares, files=[dict(result, myplugin_passes=5)])
  (tmp_path / "broken.json").write_text(json.dumps(broken))
  assert check_shares(tmp_path / "broken.json") == ["sub/standin_test.py: 5/4 is not a share",
                                                    "sub/standin_test.py: 1 misses named for 5/4"]
  (tmp_path / "empty.json").write_text(json.dumps(dict(shares, files=[])))
  assert check_shares(tmp_path / "empty.json") == ["sub/standin_test.py: no result"]
  (tmp_path / "torn.json").write_text((tmp_path / "out" / "jax-tests.json").read_text()[:100])
  assert "not a shares file" in check_shares(tmp_path / "torn.json")[0]

  # The hung run: the part fails, saying why, and keeps what had run.
  r = hung
  assert r.returncode == 1, r.output
  summary = (tmp_path / "hung-out" / "summary.txt").read_text()
  assert "past its deadline" in summary and "FAILED: ci/jax_tests.py (rc=1)" in summary, summary
  [result] = json.loads((tmp_path / "hung-out" / "jax-tests.json").read_text())["files"]
  # Cut by SIGINT after the tests before it: pytest still wrote what had run.
  assert result["rc"] < 0 and result["myplugin"] == {"passed": 2, "failed": 1, "skipped": 0}, result
  # An older kit without jax-tests/ says so.
  (tmp_path / "old-kit").mkdir()
  r = jax_tests_part(tmp_path / "old-kit", tmp_path / "old-out")
  assert r.returncode == 1 and "the kit has no jax-tests/" in r.stdout, r.output
  r = kit("--offline", str(tmp_path / "old-kit"), "--part", "gpu", "--dry-run")
  assert r.returncode == 2 and "--dry-run goes with the online run or --offline --part jax-tests" in r.stderr, r.stderr


def test_jax_tests_commands_side_by_side_with_cuda(tmp_path):
  """What the GPU run starts (no CUDA client here: the commands only):
  myplugin over the CUDA engine told the device is a GPU, jax's cuda
  backend as it is, both with the helpers' plugin; and its plan's time."""
  import argparse
  sys.path.insert(0, os.path.join(ROOT, "ci"))
  import jax_tests
  args = argparse.Namespace(python="python3", out=tmp_path, jax_src=tmp_path / "src", dut="gpu", reference="cuda",
                            generated_cases=2)
  cmd, env = jax_tests.pytest_command(args, "myplugin")
  assert cmd[-3:] == ["-p", "myplugin_test_dut", "--jax_test_dut=gpu"], cmd
  assert (env["JAX_PLATFORMS"], env["MYPLUGIN_ENGINE"], env["JAX_NUM_GENERATED_CASES"]) == ("myplugin", "cuda", "2")
  assert env.get("MYPLUGIN_NUM_DEVICES") == os.environ.get("MYPLUGIN_NUM_DEVICES")  # one device per GPU
  assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
  cmd, env = jax_tests.pytest_command(args, "cuda")
  assert cmd[-2:] == ["-p", "myplugin_test_dut"] and env["JAX_PLATFORMS"] == "cuda", cmd
  assert not {"XLA_FLAGS", "MYPLUGIN_ENGINE", "MYPLUGIN_NUM_DEVICES"} & (set(env) - set(os.environ)), env
  assert str(tmp_path / "src") in (tmp_path / "myplugin_test_dut.py").read_text()
  r = run([sys.executable, os.path.join(ROOT, "ci", "jax_tests.py"), "--subset", "gpu", "--plan", "--budget", "100"],
          dict(os.environ), timeout=60)
  assert r.returncode == 1 and "5 files" in r.stdout and "over the budget of 100.0 s" in r.stderr, r.output

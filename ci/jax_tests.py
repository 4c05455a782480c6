"""jax's own test files, run by hand on myplugin and on jax's CPU backend.

Not part of CI: on 2 cores one row takes hours. The figures go into the
README's conformance table.

    python ci/jax_tests.py --python VENV/bin/python --tests JAX_TESTS_DIR --out DIR [--files a_test.py ...]

One process: each file runs under pytest on myplugin (8 devices, jax's
harness told that the devices are CPUs); every
test that did not pass there (failed, errored or skipped) runs again on
jax's CPU backend (8 devices). The figure is the share of what passes on
jax's CPU backend that passes on myplugin. Tests that pass on myplugin are
not rerun on the CPU backend (counted as passing there: run a file with
--full-reference to check that for it).

Several processes: each file of tests/multiprocess runs over --processes
processes on both backends (their own launcher, --num_processes), and the
unittest summaries are compared.

Every run has a deadline (--file-timeout); a process that aborts shows as
its signal in the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

# The files one process runs by default: the public API, the SPMD paths,
# random numbers, the reductions and control flow jax's users lean on.
DEFAULT_FILES = [
    "api_test.py", "array_test.py", "pjit_test.py", "pmap_test.py", "shard_map_test.py",
    "random_test.py", "lax_test.py", "lax_numpy_reducers_test.py", "lax_control_flow_test.py",
    "debugging_primitives_test.py", "python_callback_test.py", "multi_device_test.py",
    "memories_test.py", "layout_test.py", "checkify_test.py", "custom_api_test.py",
    "lax_autodiff_test.py", "linalg_test.py", "nn_test.py", "state_test.py",
]
# The multi-process files that need only CPUs.
MULTIPROCESS_FILES = [
    "all_gather_test.py", "all_reduce_test.py", "all_to_all_test.py", "array_test.py",
    "axis_index_test.py", "device_id_test.py", "host_callback_test.py", "key_value_store_test.py",
    "multihost_utils_test.py", "pjit_test.py", "pmap_test.py", "wait_barrier_test.py",
]
DEVICES = 8


def backend_env(platform: str) -> dict:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = platform
    if platform == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    else:
        env["MYPLUGIN_NUM_DEVICES"] = str(DEVICES)
    return env


# jax's harness picks tests by the device's tag (cpu, gpu, tpu) and knows
# no plugin's. Its flag --jax_test_dut says what the device under test is,
# and each test file hands jax's flag parser the --jax arguments of the
# command line: this pytest plugin only lets pytest accept that one, so the
# harness runs on myplugin's CPU devices what it runs on its own. (Setting
# the flag from the plugin instead imports jax's test_util before pytest
# captures output, which breaks its capture_stdout.)
DUT_PLUGIN = """def pytest_addoption(parser):
    parser.addoption("--jax_test_dut", help="read by jax's own flag parser")
"""


def pytest_command(args, platform: str) -> tuple[list[str], dict]:
    env = backend_env(platform)
    cmd = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    if platform == "myplugin":
        (args.out / "myplugin_test_dut.py").write_text(DUT_PLUGIN)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.out), env.get("PYTHONPATH")]))
        cmd += ["-p", "myplugin_test_dut", "--jax_test_dut=cpu"]
    return cmd, env


def run_bounded(cmd, env, cwd, log: Path, timeout: float) -> int:
    """Runs cmd in its own process group; kills the group at the deadline."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -signal.SIGKILL
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def junit_outcomes(path: Path) -> dict[str, str]:
    """test id -> passed | failed | skipped, from pytest's junit file."""
    outcomes = {}
    if not path.exists():
        return outcomes
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = "failed"
        elif case.find("skipped") is not None:
            outcomes[name] = "skipped"
        else:
            outcomes[name] = "passed"
    return outcomes


def pytest_ids(outcomes: dict[str, str], file: str) -> list[str]:
    """Node ids pytest accepts back, from junit's dotted class names."""
    ids = []
    for name in outcomes:
        cls, test = name.split("::", 1)
        ids.append(f"{file}::{cls.rsplit('.', 1)[-1]}::{test}")
    return ids


def one_process(args, file: str) -> dict:
    out = args.out / "one_process" / file.removesuffix(".py")
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    cmd, env = pytest_command(args, "myplugin")
    rc = run_bounded(cmd + [file, f"--junitxml={out}/myplugin.xml"], env,
                     args.tests, out / "myplugin.log", args.file_timeout)
    mine = junit_outcomes(out / "myplugin.xml")
    if args.full_reference:
        todo = None
    else:
        todo = {k: v for k, v in mine.items() if v != "passed"}
    ref_rc = 0
    reference = {}
    if todo is None or todo:
        selection = [file] if todo is None else pytest_ids(todo, file)
        (out / "reference_ids.txt").write_text("\n".join(selection) + "\n")
        cmd, env = pytest_command(args, "cpu")
        ref_rc = run_bounded(cmd + selection + [f"--junitxml={out}/cpu.xml"], env,
                             args.tests, out / "cpu.log", args.file_timeout)
        if ref_rc == 4 and todo is not None:
            # pytest cannot select some of jax's generated names by node id
            # (brackets inside the name): the whole file runs instead.
            todo = None
            ref_rc = run_bounded(cmd + [file, f"--junitxml={out}/cpu.xml"], env,
                                 args.tests, out / "cpu.log", args.file_timeout)
        reference = junit_outcomes(out / "cpu.xml")
    passed_mine = {k for k, v in mine.items() if v == "passed"}
    if todo is None:
        passed_ref = {k for k, v in reference.items() if v == "passed"}
    else:
        passed_ref = passed_mine | {k for k, v in reference.items() if v == "passed"}
    misses = sorted(passed_ref - passed_mine)
    result = {
        "file": file, "rc": rc, "reference_rc": ref_rc, "seconds": round(time.time() - start),
        "reference_passes": len(passed_ref), "myplugin_passes": len(passed_ref & passed_mine),
        "misses": {k: mine.get(k, "absent") for k in misses},
    }
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


SUMMARY = re.compile(r"^(Ran (\d+) tests?|OK.*|FAILED \(.*\))$", re.M)


def unittest_summary(log: Path) -> str:
    text = log.read_text(errors="replace")
    return " ".join(sorted(set(m.group(1) for m in SUMMARY.finditer(text))))


def multi_process(args, file: str) -> dict:
    out = args.out / f"multiprocess_{args.processes}" / file.removesuffix(".py")
    out.mkdir(parents=True, exist_ok=True)
    result = {"file": file}
    for platform in ("cpu", "myplugin"):
        env = backend_env(platform)
        env.pop("XLA_FLAGS", None)
        env.pop("MYPLUGIN_NUM_DEVICES", None)
        rc = run_bounded([args.python, file, f"--num_processes={args.processes}"], env,
                         args.tests / "multiprocess", out / f"{platform}.log", args.file_timeout)
        result[platform] = {"rc": rc, "summary": unittest_summary(out / f"{platform}.log")}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True)
    parser.add_argument("--tests", type=Path, required=True, help="a jax checkout's tests/ folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--files", nargs="*", default=None)
    parser.add_argument("--multiprocess", action="store_true", help="run tests/multiprocess instead")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--full-reference", action="store_true")
    parser.add_argument("--file-timeout", type=float, default=3600)
    args = parser.parse_args()
    args.tests = args.tests.resolve()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    files = args.files or (MULTIPROCESS_FILES if args.multiprocess else DEFAULT_FILES)
    for file in files:
        if args.multiprocess:
            r = multi_process(args, file)
            print(f"{file}: cpu rc={r['cpu']['rc']} {r['cpu']['summary']} | "
                  f"myplugin rc={r['myplugin']['rc']} {r['myplugin']['summary']}", flush=True)
        else:
            r = one_process(args, file)
            share = r["myplugin_passes"] / r["reference_passes"] if r["reference_passes"] else 1.0
            print(f"{file}: {r['myplugin_passes']}/{r['reference_passes']} ({share:.2%}) rc={r['rc']} "
                  f"ref_rc={r['reference_rc']} {r['seconds']} s; misses: {list(r['misses'].items())[:8]}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

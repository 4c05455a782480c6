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

The GPU kit's part (ci/gpu_tests.sh --offline KIT --part jax-tests):

    python ci/jax_tests.py --python python3 --tests KIT/jax-tests/tests --reference cuda \
        --selection KIT/jax-tests/selection.json --subset gpu --out DIR

runs the subset of jax's GPU test files that selection.json names (each
file with its -k expression and deadline) on myplugin over the CUDA engine
(jax's harness told the device is a GPU) and, side by side, every one of
them on jax's own `cuda` backend; --reference cpu --subset dry-run runs
the same files' CPU subset on myplugin's CPU engine and jax's CPU backend.
Both write shares.json and shares.md (passed on myplugin / passed on the
reference, per file); --check SHARES says whether a run gave a result.
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
# The GPU kit's subset: jax's test files covering what runs on a GPU only
# (Pallas through Triton, the profiler with CUPTI, cuSOLVER linalg, cuDNN
# attention, host memory spaces). Each entry: file, -k expression, seconds
# one backend may take on it. "gpu" runs there (sized from the counts that
# pytest --collect-only gives with jax 0.11.2 and jax's tests of
# 2026-08-08, told the device is a GPU: 25, 17, 46, 38 (the cuDNN cases,
# of which CUDA 13 skips those that the test says build no plan) and 45
# tests, each backend's run of a file within its deadline, 2 x 100 s in
# all at worst, about 3 minutes with the kit's install; not yet timed on a
# GPU). "dry-run" is the same files' CPU subset (interpret-mode Pallas,
# jax's XLA attention) that a CPU runs in seconds.
# --prepare writes both into the kit's selection.json.
GPU_SUBSET = {
    "gpu": [
        ["pallas/pallas_test.py", "PallasTritonTest or (PallasCallTest and not Interpret and "
         "(matmul_block_spec_m_1024_n_1024_k_512_dtype_float32 or test_split or const_args or dot_with_vector))", 25],
        ["profiler_test.py", "not Subprocess and not remote and not rocm and not Sampling and not Concurrency", 20],
        ["linalg_test.py", "testCholesky or testLu or testQr or testEigh or testSVD", 20],
        ["nn_test.py", "DotProductAttention and not xla", 20],
        ["memories_test.py", "DevicePutTest or ActivationOffloadingTest", 15],
    ],
    "dry-run": [
        ["pallas/pallas_test.py", "PallasInterpretTest and (test_add_one or test_add_first)", 60],
        ["profiler_test.py", "testTraceAnnotation or testTraceFunction", 60],
        ["linalg_test.py", "testCholesky", 60],
        ["nn_test.py", "testDotProductAttentionMask", 60],
        ["memories_test.py", "ShardingMemoriesTest and (default_memory_kind or canonicalize_memory_kind)", 60],
    ],
    # jax's harness samples this many cases of each generated test (its
    # JAX_NUM_GENERATED_CASES, seeded: both backends get the same cases).
    "generated_cases": 2,
}
# After a run's deadline: SIGINT (pytest stops and still writes its junit
# file), then SIGKILL of the process group this many seconds later.
INTERRUPT_GRACE_S = 5


def backend_env(platform: str, args=None) -> dict:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = platform
    if getattr(args, "generated_cases", None):
        env["JAX_NUM_GENERATED_CASES"] = str(args.generated_cases)
    if platform == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    elif platform == "myplugin" and getattr(args, "reference", "cpu") == "cuda":
        env["MYPLUGIN_ENGINE"] = "cuda"  # one device per GPU, as jax's own
    elif platform == "myplugin":
        env["MYPLUGIN_NUM_DEVICES"] = str(DEVICES)
    return env


# jax's harness picks tests by the device's tag (cpu, gpu, tpu) and knows
# no plugin's. Its flag --jax_test_dut says what the device under test is,
# and each test file hands jax's flag parser the --jax arguments of the
# command line: this pytest plugin only lets pytest accept that one, so the
# harness runs on myplugin's devices what it runs on its own. (Setting the
# flag from the plugin instead imports jax's test_util before pytest
# captures output, which breaks its capture_stdout.)
#
# With --jax-src it also serves the test helpers that jax's wheel leaves
# out (jax/_src/pallas/pallas_test_util.py, jax/_src/hypothesis_test_util.py),
# from a folder of jax's sources, when a test imports one: a finder after
# every other, so the installed jax's own modules always win. jax's tests
# of 2026-08-08 name the flag jax_pallas_use_mosaic_gpu that jax 0.11.2
# dropped (its Pallas lowers to Triton unless compiler params say Mosaic
# GPU): where the release lacks it, the flag is defined False, that behaviour.
#
# Told the device is a GPU (--jax_test_dut=gpu), jax's harness also asks
# jax for the devices of the "gpu" backend (jtu.is_cuda_compute_capability_at_least
# calls xla_bridge.local_devices(backend="gpu"), which every Pallas test's
# setUp does), and jax's alias "gpu" knows only cuda, rocm and oneapi: with
# myplugin alone that raises "Unknown backend". In the myplugin run the
# alias then names myplugin's devices: only where jax would have raised
# (no cuda, rocm or oneapi backend present), never in lowering.
DUT_PLUGIN = """import importlib.abc, importlib.util, os, sys
JAX_SRC = {jax_src!r}


def _define_dropped_flags():
    from jax._src import config
    if not hasattr(config, "jax_pallas_use_mosaic_gpu"):
        config.jax_pallas_use_mosaic_gpu = config.bool_state(
            "jax_pallas_use_mosaic_gpu", False, help="defined by ci/jax_tests.py for older test files")


class _HelpersLeftOutOfTheWheel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if not JAX_SRC or not name.startswith("jax."):
            return None
        file = os.path.join(JAX_SRC, *name.split(".")) + ".py"
        if not os.path.isfile(file):
            return None
        _define_dropped_flags()
        return importlib.util.spec_from_file_location(name, file)


sys.meta_path.append(_HelpersLeftOutOfTheWheel())


def pytest_addoption(parser):
    parser.addoption("--jax_test_dut", help="read by jax's own flag parser")


def pytest_configure(config):
    if config.getoption("--jax_test_dut", None) != "gpu" or os.environ.get("JAX_PLATFORMS") != "myplugin":
        return
    from jax._src import xla_bridge
    canonicalize = xla_bridge.canonicalize_platform

    def gpu_is_myplugin(platform):
        try:
            return canonicalize(platform)
        except RuntimeError:
            if platform == "gpu" and "myplugin" in xla_bridge.backends():
                return "myplugin"
            raise
    xla_bridge.canonicalize_platform = gpu_is_myplugin
"""


def pytest_command(args, platform: str) -> tuple[list[str], dict]:
    env = backend_env(platform, args)
    cmd = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    jax_src = str(args.jax_src) if getattr(args, "jax_src", None) else ""
    if platform == "myplugin" or jax_src:
        (args.out / "myplugin_test_dut.py").write_text(DUT_PLUGIN.format(jax_src=jax_src))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.out), env.get("PYTHONPATH")]))
        cmd += ["-p", "myplugin_test_dut"]
    if platform == "myplugin":
        cmd += [f"--jax_test_dut={getattr(args, 'dut', None) or 'cpu'}"]
    return cmd, env


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when this driver dies (Linux's
    PR_SET_PDEATHSIG), so a driver killed from outside (its caller's
    deadline) leaves no pytest behind in its own process group."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_bounded(cmd, env, cwd, log: Path, timeout: float) -> int:
    """Runs cmd in its own process group. At the deadline: SIGINT (pytest
    stops and writes what it has), then SIGKILL of the group; returns
    -SIGINT or -SIGKILL then, whatever the process itself returned."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=INTERRUPT_GRACE_S)
                return -signal.SIGINT
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
        if not case.get("name"):
            continue  # the entry pytest writes for the test a SIGINT stopped
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


def counts(outcomes: dict[str, str]) -> dict[str, int]:
    return {kind: sum(v == kind for v in outcomes.values()) for kind in ("passed", "failed", "skipped")}


def one_process(args, file: str, keyword: str | None = None, timeout: float | None = None) -> dict:
    """One file (its -k subset) on myplugin, then on the reference backend:
    the tests that did not pass on myplugin, or all of them with
    --full-reference (always against cuda: side by side)."""
    timeout = timeout or args.file_timeout
    select = [file] + (["-k", keyword] if keyword else [])
    out = args.out / "one_process" / file.removesuffix(".py")
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    cmd, env = pytest_command(args, "myplugin")
    rc = run_bounded(cmd + select + [f"--junitxml={out}/myplugin.xml"], env,
                     args.tests, out / "myplugin.log", timeout)
    mine = junit_outcomes(out / "myplugin.xml")
    if args.full_reference or args.reference != "cpu":
        todo = None
    else:
        todo = {k: v for k, v in mine.items() if v != "passed"}
    ref_rc = 0
    reference = {}
    ref = args.reference
    if todo is None or todo:
        selection = select if todo is None else pytest_ids(todo, file)
        (out / "reference_ids.txt").write_text("\n".join(selection) + "\n")
        cmd, env = pytest_command(args, ref)
        ref_rc = run_bounded(cmd + selection + [f"--junitxml={out}/{ref}.xml"], env,
                             args.tests, out / f"{ref}.log", timeout)
        if ref_rc == 4 and todo is not None:
            # pytest cannot select some of jax's generated names by node id
            # (brackets inside the name): the whole file runs instead.
            todo = None
            ref_rc = run_bounded(cmd + select + [f"--junitxml={out}/{ref}.xml"], env,
                                 args.tests, out / f"{ref}.log", timeout)
        reference = junit_outcomes(out / f"{ref}.xml")
    passed_mine = {k for k, v in mine.items() if v == "passed"}
    if todo is None:
        passed_ref = {k for k, v in reference.items() if v == "passed"}
    else:
        passed_ref = passed_mine | {k for k, v in reference.items() if v == "passed"}
    misses = sorted(passed_ref - passed_mine)
    result = {
        "file": file, "k": keyword, "timeout_s": timeout, "rc": rc, "reference_rc": ref_rc,
        "seconds": round(time.time() - start),
        "reference_passes": len(passed_ref), "myplugin_passes": len(passed_ref & passed_mine),
        "myplugin": counts(mine), "reference": counts(reference) if todo is None else None,
        "misses": {k: mine.get(k, "absent") for k in misses},
        # Passing on myplugin alone (side by side only): worth a look, not a miss.
        "only_myplugin": sorted(passed_mine - passed_ref) if todo is None else [],
    }
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def share_text(r: dict) -> str:
    return f"{r['myplugin_passes']}/{r['reference_passes']}"


def write_shares(args, results: list[dict]) -> Path:
    """shares.json (every file's result) and shares.md (a table the docs take)."""
    import importlib.metadata as md
    versions = {}
    for dist in ("jax", "jaxlib", "myplugin", "jax-cuda13-pjrt", "jax-cuda12-pjrt"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    shares = {"reference": args.reference, "dut": args.dut, "subset": args.subset,
              "generated_cases": args.generated_cases, "tests": str(args.tests),
              "driver_python": sys.version.split()[0], "versions": versions, "files": results}
    path = args.out / "shares.json"
    path.write_text(json.dumps(shares, indent=1))
    lines = [f"| file (-k subset) | passed on myplugin / passed on {args.reference} | "
             f"myplugin: passed, failed, skipped | {args.reference}: passed, failed, skipped | note |",
             "|---|---|---|---|---|"]
    for r in results:
        ref = r["reference"] or {}
        note = []
        if r["rc"] < 0 or r["reference_rc"] < 0:
            note.append(f"cut at its {r['timeout_s']:.0f} s deadline")
        if r["only_myplugin"]:
            note.append(f"{len(r['only_myplugin'])} pass on myplugin only")
        lines.append(f"| `{r['file']}` (`{r['k'] or 'all'}`) | {share_text(r)} | "
                     f"{r['myplugin']['passed']}, {r['myplugin']['failed']}, {r['myplugin']['skipped']} | "
                     f"{ref.get('passed', '-')}, {ref.get('failed', '-')}, {ref.get('skipped', '-')} | "
                     f"{'; '.join(note)} |")
    (args.out / "shares.md").write_text("\n".join(lines) + "\n")
    return path


def check_shares(path: Path, files: list[str] | None = None) -> list[str]:
    """What keeps a shares.json from being a result: unreadable, a file
    missing, a run that crashed or ran past its deadline, a reference that
    passed nothing (no backend, nothing collected), counts that disagree."""
    try:
        shares = json.loads(Path(path).read_text())
        results = {r["file"]: r for r in shares["files"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{path}: not a shares file ({e})"]
    problems = []
    for file in files or []:
        if file not in results:
            problems.append(f"{file}: no result")
    for file, r in results.items():
        try:
            if r["rc"] not in (0, 1) or r["reference_rc"] not in (0, 1):
                why = "past its deadline" if min(r["rc"], r["reference_rc"]) < 0 else "pytest failed to run"
                problems.append(f"{file}: rc={r['rc']}, reference_rc={r['reference_rc']} ({why})")
            if r["reference_passes"] == 0:
                problems.append(f"{file}: nothing passed on {shares['reference']}")
            if not 0 <= r["myplugin_passes"] <= r["reference_passes"]:
                problems.append(f"{file}: {share_text(r)} is not a share")
            if r["reference"] is not None and r["reference"]["passed"] != r["reference_passes"]:
                problems.append(f"{file}: {r['reference']['passed']} passed on {shares['reference']}, "
                                f"but the share counts {r['reference_passes']}")
            if len(r["misses"]) != r["reference_passes"] - r["myplugin_passes"]:
                problems.append(f"{file}: {len(r['misses'])} misses named for {share_text(r)}")
        except (KeyError, TypeError) as e:
            problems.append(f"{file}: malformed result ({e!r})")
    return problems


def load_selection(args) -> tuple[list[list], int | None]:
    table = json.loads(Path(args.selection).read_text()) if args.selection else GPU_SUBSET
    return table[args.subset], table.get("generated_cases")


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


def plan(args) -> int:
    """Prints a subset's files and the worst case of its time (each file
    on both backends to its deadline, then the grace after SIGINT)."""
    entries, cases = load_selection(args)
    worst = sum(2 * (timeout + INTERRUPT_GRACE_S) for _, _, timeout in entries)
    for file, keyword, timeout in entries:
        print(f"{file}: -k '{keyword}', {timeout} s per backend")
    print(f"{len(entries)} files, JAX_NUM_GENERATED_CASES={cases}; at most {worst} s on both backends")
    if args.budget and worst > args.budget:
        print(f"over the budget of {args.budget} s", file=sys.stderr)
        return 1
    return 0


COLLECTED = re.compile(r"^(\d+)(?:/\d+)? tests? collected", re.M)


def collect(args, entries) -> int:
    """Each file's -k subset collected on jax's CPU backend, the harness
    told the device is --dut (no GPU needed, none touched): a file that
    fails to import or selects nothing is an error."""
    bad = 0
    for file, keyword, _ in entries:
        cmd, env = pytest_command(args, "myplugin")
        env = backend_env("cpu", args) | {"PYTHONPATH": env["PYTHONPATH"]}
        log = args.out / (file.replace("/", "_") + ".collect.log")
        rc = run_bounded(cmd + ["--collect-only", file, "-k", keyword], env, args.tests, log, args.file_timeout)
        found = COLLECTED.search(log.read_text(errors="replace"))
        n = int(found.group(1)) if found else 0
        print(f"{file}: {n} tests selected (-k '{keyword}'), rc={rc}", flush=True)
        if rc != 0 or n == 0:
            print(log.read_text(errors="replace")[-2000:])
            bad += 1
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python")
    parser.add_argument("--tests", type=Path, help="a jax checkout's tests/ folder")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--files", nargs="*", default=None)
    parser.add_argument("-k", dest="keyword", help="pytest's -k for every file of --files")
    parser.add_argument("--multiprocess", action="store_true", help="run tests/multiprocess instead")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--full-reference", action="store_true")
    parser.add_argument("--file-timeout", type=float, default=3600)
    parser.add_argument("--reference", choices=("cpu", "cuda"), default="cpu",
                        help="jax's backend to compare with (cuda: myplugin over the CUDA engine, side by side)")
    parser.add_argument("--dut", choices=("cpu", "gpu"), help="what jax's harness is told myplugin's devices are "
                        "(default: cpu against cpu, gpu against cuda)")
    parser.add_argument("--subset", choices=("gpu", "dry-run"), help="the GPU kit's files, -k and deadlines")
    parser.add_argument("--selection", type=Path, help="the subsets' table (the kit's selection.json; "
                        "default: this script's GPU_SUBSET)")
    parser.add_argument("--jax-src", type=Path, help="a folder of jax's sources: the test helpers its wheel leaves out")
    parser.add_argument("--generated-cases", type=int, help="JAX_NUM_GENERATED_CASES on both backends")
    parser.add_argument("--plan", action="store_true", help="print --subset's plan and worst-case time; run nothing")
    parser.add_argument("--budget", type=float, help="with --plan: fail if the worst case is over this many seconds")
    parser.add_argument("--write-selection", type=Path, help="write GPU_SUBSET as JSON there; run nothing")
    parser.add_argument("--check", type=Path, help="check a shares.json (with --subset: that it has each file)")
    parser.add_argument("--list-files", action="store_true", help="print --subset's files; run nothing")
    parser.add_argument("--collect-only", action="store_true",
                        help="only check that each file of --subset selects tests (on jax's CPU backend)")
    args = parser.parse_args()
    # SIGTERM (timeout(1) around this driver) unwinds, killing the running test's group.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.write_selection:
        args.write_selection.write_text(json.dumps(GPU_SUBSET, indent=1) + "\n")
        return 0
    if (args.plan or args.list_files or args.collect_only) and not args.subset:
        parser.error("--plan, --list-files and --collect-only need --subset")
    if args.plan:
        return plan(args)
    if args.list_files:
        print("\n".join(entry[0] for entry in load_selection(args)[0]))
        return 0
    if args.check:
        files = [entry[0] for entry in load_selection(args)[0]] if args.subset else None
        problems = check_shares(args.check, files)
        for p in problems:
            print(f"{args.check}: {p}")
        return 1 if problems else 0
    for name in ("python", "tests", "out"):
        if getattr(args, name) is None:
            parser.error(f"--{name} is needed to run tests")
    if args.reference == "cuda" and args.multiprocess:
        parser.error("--multiprocess runs against jax's CPU backend only")
    args.dut = args.dut or ("gpu" if args.reference == "cuda" else "cpu")
    args.tests = args.tests.resolve()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.subset:
        entries, cases = load_selection(args)
        if args.generated_cases is None:
            args.generated_cases = cases
        if args.files:
            entries = [e for e in entries if e[0] in args.files]
    else:
        entries = [[f, args.keyword, None] for f in
                   (args.files or (MULTIPROCESS_FILES if args.multiprocess else DEFAULT_FILES))]
    # The multi-process files live in jax's tests/multiprocess (multi_process runs them there).
    folder = args.tests / "multiprocess" if args.multiprocess else args.tests
    missing = [e[0] for e in entries if not (folder / e[0]).is_file()]
    if missing:
        parser.error(f"{folder} has no {', '.join(missing)}")
    if args.collect_only:
        return collect(args, entries)
    results = []
    for file, keyword, timeout in entries:
        if args.multiprocess:
            r = multi_process(args, file)
            print(f"{file}: cpu rc={r['cpu']['rc']} {r['cpu']['summary']} | "
                  f"myplugin rc={r['myplugin']['rc']} {r['myplugin']['summary']}", flush=True)
        else:
            r = one_process(args, file, keyword, timeout)
            results.append(r)
            share = r["myplugin_passes"] / r["reference_passes"] if r["reference_passes"] else 1.0
            print(f"{file}: {share_text(r)} ({share:.2%}) rc={r['rc']} "
                  f"ref_rc={r['reference_rc']} {r['seconds']} s; misses: {list(r['misses'].items())[:8]}",
                  flush=True)
    if results:
        path = write_shares(args, results)
        problems = check_shares(path, [e[0] for e in entries])
        for p in problems:
            print(f"no result: {p}", flush=True)
        if args.subset and problems:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Sanitizer builds (clang 16, CMake option MYPLUGIN_SANITIZE), in CI after
# the test command:
#  1. ASan+UBSan: the C++ unit tests (tests/cpp), then the coordination,
#     collectives and bad-input Python tests, and the tests of arrays that
#     several threads touch while they move (transfers between processes,
#     DLPack, the stress jobs of test_array_threads.py), against an
#     instrumented module installed in a virtual environment of its own;
#  2. TSan: the C++ unit tests, among them the coordination service with 32
#     concurrent clients over real sockets (coordination_stress_tests.cc),
#     and the buffer holds and the GIL-aware lock under many threads
#     (buffer_holds_tests.cc, gil_aware_mutex_tests.cc). The Python jobs do
#     not run under TSan: CPython, jaxlib and the engine are not
#     instrumented, so their accesses (the engine's list of external
#     references among them) are invisible to it.
# Every finding aborts the process that made it (no recovery), so the script
# exits non-zero on any. Build folders: build-sanitizers/ (ccache).
#
#   bash ci/sanitizers.sh        # CXX=clang++-16 PYTHON=python3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cxx=${CXX:-clang++-16}
python=${PYTHON:-python3}
out=${SANITIZER_BUILD_DIR:-$root/build-sanitizers}
runtime_dir=$("$cxx" -print-runtime-dir)
asan_runtime=$runtime_dir/libclang_rt.asan-x86_64.so
[ -f "$asan_runtime" ] || { echo "no ASan runtime at $asan_runtime: apt-get install libclang-rt-16-dev" >&2; exit 1; }
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)

# Every report names its stack; a finding is fatal. Python and the XLA
# engine are not instrumented and keep memory until exit by design (interned
# objects, caches): leak checking of the interpreter would report those, so
# it is off there (detect_leaks=0) and on for the C++ unit tests.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
asan_common=abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0
suppressions=$root/ci/tsan.supp
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$suppressions"

start=$SECONDS
# ASan+UBSan: one build serves both the Python module (installed into a
# virtual environment of its own) and the unit tests (built beside it).
venv=$out/venv-asan
[ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
CXX=$cxx nice "$venv/bin/pip" install -q --no-deps --disable-pip-version-check \
  --config-settings=cmake.define.MYPLUGIN_SANITIZE=address,undefined \
  --config-settings=cmake.define.MYPLUGIN_BUILD_TESTS=ON \
  --config-settings=cmake.define.CMAKE_CXX_COMPILER="$cxx" \
  --config-settings=build-dir="$out/asan" "$root"
echo "+ [address,undefined] myplugin_unit_tests ($((SECONDS - start)) s)"
ASAN_OPTIONS=$asan_common:detect_leaks=1 timeout 300 "$out/asan/myplugin_unit_tests"

# The Python tests on that module. The interpreter is not instrumented: the
# ASan runtime is preloaded (it must come first among the libraries), and
# every process the tests start inherits it through the environment.
# One test is left out: test_descriptor_exhaustion_does_not_wedge_the_service
# exhausts the service's descriptors on purpose, and UBSan's vptr check
# probes memory through a pipe (compiler-rt's IsAccessibleMemoryRange): with
# no descriptor free, every virtual call then reports "invalid vptr" (seen:
# a shared_ptr's control block, "memory cannot be printed"). The tests that
# only move more data through the paths the others cover (64 MiB per op,
# the 1 GiB call under a stall bound) are left out too: under ASan they took
# about 100 s of this step and found nothing the smaller ones do not reach.
# All of them run in the normal test command.
# The error path's races (test_collectives.py's fault-delay tests) run more
# rounds here, each with another delay, under the sanitizers' own slowness.
# Two tests at a time, test by test (test_collectives.py alone is most of
# the time: its tests are separate jobs, each with its own service).
echo "+ [address,undefined] pytest: coordination, collectives, bad input ($((SECONDS - start)) s)"
(cd "$out" && LD_PRELOAD=$asan_runtime ASAN_OPTIONS=$asan_common:detect_leaks=0 TEST_RACE_ROUNDS=4 \
  timeout 420 "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist load --rootdir "$root" \
  "$root/tests/test_coordination.py" "$root/tests/test_coordination_bad_input.py" \
  "$root/tests/test_collectives.py" "$root/tests/test_bad_input.py" \
  -k "not test_descriptor_exhaustion_does_not_wedge_the_service and not test_64_megabyte_all_reduce \
and not test_every_op_on_64_megabytes and not test_a_call_longer_than_the_stall_bound_completes_while_data_moves")

# The arrays that several threads touch while they move between processes:
# every stress job, DLPack, and the transfer tests but the 300 MiB ones
# (the same paths with more bytes) and the network namespaces' (root's
# setup, the same code over TCP).
echo "+ [address,undefined] pytest: arrays touched by several threads, transfers, DLPack ($((SECONDS - start)) s)"
(cd "$out" && LD_PRELOAD=$asan_runtime ASAN_OPTIONS=$asan_common:detect_leaks=0 \
  timeout 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist load --rootdir "$root" \
  "$root/tests/test_array_threads.py" "$root/tests/test_dlpack.py" "$root/tests/test_cross_host_transfers.py" \
  -k "not over_256_mib and not across_hosts")

# TSan: the unit tests alone.
echo "+ [thread] myplugin_unit_tests ($((SECONDS - start)) s)"
cmake -S "$root" -B "$out/tsan" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  -DMYPLUGIN_SANITIZE=thread -DMYPLUGIN_BUILD_TESTS=ON -DPython_EXECUTABLE="$(command -v "$python")" >/dev/null
nice cmake --build "$out/tsan" --target myplugin_unit_tests -j2
timeout 300 "$out/tsan/myplugin_unit_tests"
echo "sanitizers: clean ($((SECONDS - start)) s)"

#!/usr/bin/env bash
# The fuzz targets in CI: builds the libFuzzer targets fuzz/*_fuzzer.cc
# (clang 16, CMake option MYPLUGIN_FUZZ: ASan+UBSan and coverage on the
# library code too) in build-fuzz/ (ccache), then runs every target for a
# fixed time on a copy of its seed corpus (fuzz/corpus/<target>/), two at a
# time, with the Atheris target of the HLO rewrite (fuzz/hlo_rewrite_fuzzer.py),
# then as long a random mix of jobs whose arrays several threads touch
# (fuzz/array_threads_mix.py, on the installed plugin).
# Any crash, invariant failure or sanitizer report fails the script; the
# input that caused it is kept in $FUZZ_ARTIFACTS (default build-fuzz/artifacts/).
#
#   bash ci/fuzz.sh            # FUZZ_SECONDS=45 CXX=clang++-16 PYTHON=python3
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cxx=${CXX:-clang++-16}
python=${PYTHON:-python3}
seconds=${FUZZ_SECONDS:-45}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
artifacts=${FUZZ_ARTIFACTS:-$build/artifacts}
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
start=$SECONDS

targets=()
for f in fuzz/*_fuzzer.cc; do targets+=("$(basename "$f" .cc)"); done
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMYPLUGIN_FUZZ=ON -DPython_EXECUTABLE="$(command -v "$python")" >/dev/null
nice cmake --build "$build" --target "${targets[@]}" -j2
echo "fuzz: built ${targets[*]} in $((SECONDS - start)) s"

mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1

# run NAME COMMAND...: one target on a copy of its corpus; libFuzzer's own
# options follow the command. Its log is printed if it fails.
run() {
  local name=$1; shift
  mkdir -p "$work/$name"
  if timeout $((seconds + 120)) "$@" -max_total_time="$seconds" -timeout=60 -print_final_stats=1 \
       -artifact_prefix="$artifacts/$name-" "$work/$name" "$root/fuzz/corpus/$name" >"$work/$name.log" 2>&1; then
    echo "fuzz: $name: $(grep -a -m1 'stat::number_of_executed_units' "$work/$name.log" | awk '{print $2}') runs, no crash"
  else
    echo "fuzz: $name FAILED (the input is in $artifacts/):" >&2
    grep -a -v -E '^#[0-9]+.*(NEW|REDUCE|pulse)' "$work/$name.log" | tail -60 >&2
    return 1
  fi
}

jobs=()
for t in "${targets[@]}"; do jobs+=("$t:$build/$t"); done
jobs+=("hlo_rewrite_fuzzer:$python $root/fuzz/hlo_rewrite_fuzzer.py -dict=$root/fuzz/hlo_rewrite.dict")
failed=0
pids=()
for job in "${jobs[@]}"; do
  name=${job%%:*}
  # shellcheck disable=SC2086  # the command is words
  run "$name" ${job#*:} &
  pids+=($!)
  if [ ${#pids[@]} -eq 2 ]; then
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    pids=()
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
# The random mix of transfers, exports, deletes, donations and kills
# (fuzz/array_threads_mix.py): real jobs of the installed plugin, with a
# fresh seed each; a failure prints its seed.
# It needs myplugin installed for $python (CI's test command installs it).
if ! (cd / && "$python" -c "import jax_plugin._myplugin") 2>/dev/null; then
  echo "fuzz: array_threads_mix needs myplugin installed for $python (pip install .)" >&2
  failed=1
elif ! timeout $((seconds + 300)) "$python" "$root/fuzz/array_threads_mix.py" --seconds "$seconds"; then
  echo "fuzz: array_threads_mix FAILED" >&2
  failed=1
fi
echo "fuzz: $([ $failed = 0 ] && echo clean || echo FAILED) in $((SECONDS - start)) s"
exit $failed

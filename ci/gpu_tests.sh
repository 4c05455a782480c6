#!/usr/bin/env bash
# The GPU job of .github/workflows/gpu.yml, and the offline GPU test kit.
#
# usage: ci/gpu_tests.sh [--leg single|multi] [--cuda 12|13] [--out DIR] [--dry-run]
#        ci/gpu_tests.sh --prepare DIR                 (networked machine: gather the kit)
#        ci/gpu_tests.sh --offline DIR [--part gpu|collectives|multiprocess|fsdp|jax-tests|scale] [--bench-args ARGS] [--out DIR]
#                                                      (GPU machine, no network: install the kit, run)
#        ci/gpu_tests.sh --offline DIR --part jax-tests --dry-run [--out DIR]
#                                                      (any machine: that part on CPUs)
#
# Default (a GPU machine with network): build with CUDA's headers, record
# nvidia-smi, run the tests marked gpu, the multi-process NCCL tests (one
# process per GPU, --leg multi), and the benchmarks, keeping every log in --out.
#
# --prepare DIR builds a cp312 wheel of myplugin (the GPU machine's Python)
# against jaxlib $GPU_JAX and CUDA 13's NCCL headers, and gathers what such
# a machine lacks: the Debian packages of the libraries the wheel links
# outside the system's (libgloo and its own), pytest's wheels, and the raw
# Gloo baseline of bench/collectives.py (bin/raw_gloo_allreduce, its
# libraries among those .debs), and jax's own GPU test files of --part
# jax-tests (jax-tests/: jax's wheel has no tests; JAX_SOURCE names a
# checkout of jax's sources for $GPU_JAX, which --prepare copies them from). The wheel leaves out the CPU engine
# (lammps-jax-pjrt-cpu, ~200 MB, 63 MB as its wheel packs it): single-GPU
# tests never partition on it; multi-process programs do, so the kit
# carries it xz-compressed (engine/) for --part multiprocess alone.
#
# --offline DIR installs that kit without any network (pip --no-index into
# a private folder on PYTHONPATH, the .debs unpacked with dpkg -x into a
# private prefix on LD_LIBRARY_PATH; the machine's own jax, jaxlib, CUDA
# plugin and NCCL are kept), says what is missing, and runs one part, each
# inside the device tool's limits per command (10 minutes, 8 files back
# from --out):
#   --part gpu (default): nvidia-smi, pytest -m gpu tests/gpu with
#     MYPLUGIN_ENGINE=cuda, the kit's executables compiled with no GPU
#     (aot/, tests/programs/gpu_aot_artifacts.py check), bench/gpu.py (7 files);
#   --part collectives (3 files): bench/collectives.py on the machine's CPU cores
#     (issue 16's 2 and 4 processes on one host), under a hard timeout,
#     --bench-args after its own (later ones win: --bench-args '--rounds 2').
#     It needs no XLA engine: the collectives are the plugin's runtime alone.
#   --part multiprocess (4 files): issue 39's 2 and 4 processes sharing GPU 0
#     (myplugin-run --share-gpu, NCCL between them): pytest -m gpu
#     tests/gpu/test_nccl_shared_gpu.py with MYPLUGIN_ENGINE=cuda, the CPU
#     engine from engine/ as the partitioner (MYPLUGIN_SHADOW_ENGINE_PATH),
#     the kit's 1x2x1 and 1x4x1 executables (MYPLUGIN_GPU_KIT_AOT).
#   --part fsdp (4 files): issue 51's FSDP step with 2 processes sharing
#     GPU 0 against jax's own CUDA backend in multi-process mode
#     (bench/gpu_multiprocess.py --processes 2, small psums, --profile): the
#     step times, and from each job's profile how much GEMM time ran beside
#     an NCCL kernel on another stream (bench/gpu_overlap.py); the CPU engine
#     from engine/ as the partitioner, under a hard timeout.
#   --part jax-tests (5 files): ci/jax_tests.py --subset gpu --reference cuda
#     on the kit's jax-tests/: a subset of jax's own GPU test files on
#     myplugin (CUDA engine) and on jax's cuda backend side by side, each
#     file with a deadline; the shares in jax-tests.json and jax-tests.md.
#     With --dry-run: the same files' CPU subset on myplugin's CPU engine
#     and jax's CPU backend, with the installed myplugin (no wheel, no GPU).
#   --part scale (4 files): bench/coordination_scale.py on the machine's CPU
#     cores (issue 42's coordination service at 1,024 to 16,384 simulated
#     processes, where the service and the load generator need not share
#     two cores), with the kit's generator (bin/coordination_scale), under a
#     hard timeout. It needs no GPU, engine or NCCL.
#
# --dry-run runs everything that needs no GPU (argument checks, tool
# checks, the CUDA engines' availability on the package index, test
# collection with the gpu marker, the benchmarks' argument parsing) and
# prints the GPU commands instead of running them. .ci/run calls it so.
set -euo pipefail
cd "$(dirname "$0")/.."

# The GPU machine's jax/jaxlib/jax-cuda13-pjrt release, which the kit's wheel is built for.
GPU_JAX=0.11.2
KIT_LIMIT_MB=64
# The GPUs whose executables the kit carries, compiled here (the kinds the device tool lends).
AOT_GPUS=h100,h200
# The collectives benchmark of the online run and of --part collectives, and
# the latter's hard limit (the device tool allows 600 s per command, of
# which installing the kit takes ~20 s).
COLLECTIVES_BENCH=(--processes 2,4 --rounds 5 --max-mb 64)
COLLECTIVES_TIMEOUT_S=480
# --part scale: the coordination service at scale, one event loop against
# its default (2 at 4,096 and 8 at 16,384 on 16 cores) interleaved, and its
# hard limit (about 3 minutes where the service has cores of its own; the
# bound leaves the kit's install room inside a device call of 420 s).
SCALE_BENCH=(--counts 1024,4096,16384 --runs 2 --rounds 5 --idle-seconds 3 --io-threads 1,0)
SCALE_TIMEOUT_S=360
# The topologies of the kit's executables: one GPU, and issue 39's 2 and 4
# processes of one GPU each (as processes sharing one GPU are).
AOT_TOPOLOGIES=1x1x1,1x2x1,1x4x1
# --part multiprocess's hard limits: its tests in all (inside issue 39's 6
# minutes of GPU time with the kit's install), and each one.
MULTIPROCESS_TIMEOUT_S=300
MULTIPROCESS_TEST_TIMEOUT_S=150
# --part fsdp: the benchmark's arguments and its hard limit (two jobs of 2
# processes start and compile, 3 rounds each; the device tool's 600 s per
# command leave room for the kit's install).
FSDP_BENCH=(--processes 2 --rounds 3 --max-bytes 1048576 --timeout 330)
FSDP_TIMEOUT_S=360
# The helpers of jax's test files that jax's wheel leaves out (--prepare
# copies those the source has into the kit's jax-tests/jax-src).
JAX_TEST_HELPERS="jax/_src/pallas/pallas_test_util.py jax/_src/hypothesis_test_util.py"
# --part jax-tests: the worst case of ci/jax_tests.py's GPU subset (every
# file's deadline on both backends, checked by the dry run), and the hard
# limit of the whole driver run above it.
JAX_TESTS_BUDGET_S=250
JAX_TESTS_TIMEOUT_S=300

leg=single
cuda=13
out=gpu-results
dry=0
mode=online
kit=""
part=""
bench_args=""
usage="usage: $0 [--leg single|multi] [--cuda 12|13] [--out DIR] [--dry-run] | --prepare DIR | --offline DIR [--part gpu|collectives|multiprocess|fsdp|jax-tests|scale] [--dry-run] [--bench-args ARGS] [--out DIR]"
while [ $# -gt 0 ]; do
  case "$1" in
    --leg) leg="$2"; shift 2 ;;
    --cuda) cuda="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --prepare) mode=prepare; kit="${2:?--prepare needs a folder}"; shift 2 ;;
    --offline) mode=offline; kit="${2:?--offline needs a folder}"; shift 2 ;;
    --part) part="${2:?--part needs gpu, collectives, multiprocess, fsdp, jax-tests or scale}"; shift 2 ;;
    --bench-args) bench_args="${2?--bench-args needs the arguments}"; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
case "$leg" in single|multi) ;; *) echo "--leg must be single or multi, not '$leg'" >&2; exit 2 ;; esac
case "$cuda" in 12|13) ;; *) echo "--cuda must be 12 or 13, not '$cuda'" >&2; exit 2 ;; esac
case "${part:-gpu}" in gpu|collectives|multiprocess|fsdp|jax-tests|scale) ;; *) echo "--part must be gpu, collectives, multiprocess, fsdp, jax-tests or scale, not '$part'" >&2; exit 2 ;; esac
if [ -n "$part" ] && [ "$mode" != offline ]; then echo "--part goes with --offline" >&2; exit 2; fi
part="${part:-gpu}"
if [ "$dry" = 1 ] && [ "$mode" = prepare ]; then echo "--dry-run does not go with --prepare" >&2; exit 2; fi
if [ "$dry" = 1 ] && [ "$mode" = offline ] && [ "$part" != jax-tests ]; then
  echo "--dry-run goes with the online run or --offline --part jax-tests" >&2; exit 2
fi
if [ -n "$bench_args" ] && [ "$part" != collectives ]; then echo "--bench-args goes with --part collectives" >&2; exit 2; fi
read -r -a bench_args <<<"$bench_args"

# CUDA's headers the NCCL backend compiles against (NCCL's first).
cuda_headers() {
  case "$1" in
    12) echo "nvidia-nccl-cu12>=2.18 nvidia-cuda-runtime-cu12==12.9.* nvidia-cuda-nvcc-cu12==12.9.* nvidia-cuda-cccl-cu12==12.9.*" ;;
    13) echo "nvidia-nccl-cu13>=2.27.7 nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.0.* nvidia-cuda-cccl==13.0.*" ;;
  esac
}
# The build requirements, read from pyproject.toml (defined there only).
build_requirements() {
  "$1" -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))"
}
# Fails unless the built library holds the NCCL backend (an isolated build
# without CUDA's headers silently leaves it out).
has_nccl_backend() {
  grep -q ncclAllReduce "$1" || { echo "$1 was built without the NCCL backend (no CUDA headers at build time)" >&2; return 1; }
}

# ---------------------------------------------------------------- --prepare
if [ "$mode" = prepare ]; then
  # Replaces only an earlier kit: never a folder of something else.
  if [ -d "$kit" ] && [ -n "$(ls -A "$kit")" ] && [ ! -f "$kit/MANIFEST.txt" ]; then
    echo "--prepare: $kit exists and is not a kit (no MANIFEST.txt); name a new folder" >&2; exit 2
  fi
  py="${PYTHON312:-$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python}"
  [ -x "$py" ] && "$py" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null ||
    { echo "--prepare needs Python 3.12 (the GPU machine's): $py is missing or another version; set PYTHON312" >&2; exit 2; }
  # jax's own test files of --part jax-tests: not in jax's wheel or sdist,
  # so from a checkout of jax's sources (its tests/ and jax/), checked first.
  mapfile -t jax_test_files < <("$py" ci/jax_tests.py --subset gpu --list-files)
  for f in "${jax_test_files[@]}"; do
    [ -f "${JAX_SOURCE:-/nonexistent}/tests/$f" ] || {
      echo "--prepare needs jax's own test files for --part jax-tests: set JAX_SOURCE to a checkout of jax's sources" \
           "for $GPU_JAX (its tests/ and jax/ folders; jax's wheel and sdist hold no tests); ${JAX_SOURCE:-JAX_SOURCE is unset}" \
           "has no tests/$f" >&2; exit 2; }
  done
  rm -rf "$kit" && mkdir -p "$kit/wheels" "$kit/debs"
  kit="$(cd "$kit" && pwd)"
  repo="$(pwd)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  "$py" -m venv "$work/venv"
  vpy="$work/venv/bin/python"
  mapfile -t reqs < <(build_requirements "$vpy")
  # shellcheck disable=SC2046
  "$vpy" -m pip install -q "${reqs[@]}" "jaxlib==$GPU_JAX" cmake ninja $(cuda_headers 13)
  # Without the bundled CPU engine (~63 MB packed): the kit must travel in
  # 64 MiB, and only multi-process programs partition on it.
  "$vpy" -m pip wheel -q --no-build-isolation --no-deps -C cmake.define.MYPLUGIN_BUNDLE_ENGINE=OFF -w "$kit" .
  wheel="$(ls "$kit"/myplugin-*-cp312-*.whl)"
  mkdir "$work/unpacked" && (cd "$work/unpacked" && "$vpy" -m zipfile -e "$wheel" .)
  has_nccl_backend "$work/unpacked/jax_plugin/libmyplugin_runtime.so"
  # Executables compiled here, with no GPU, for the GPUs the device tool
  # lends (H100, H200), by this very wheel over XLA's CUDA engine of the GPU
  # machine's release (jax's cuda13-local extra, and gpu-compile's compiler
  # pieces, read from pyproject.toml); --part gpu loads and runs them there.
  mapfile -t compile_pieces < <("$vpy" -c "import tomllib; print('\n'.join(r for r in tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['gpu-compile'] if not r.startswith('jax')))")
  "$vpy" -m pip install -q --no-deps "$wheel"
  "$vpy" -m pip install -q "jax[cuda13-local]==$GPU_JAX" "${compile_pieces[@]}"
  (cd "$work" && JAX_PLATFORMS=myplugin timeout 600 "$vpy" "$repo/tests/programs/gpu_aot_artifacts.py" build "$kit/aot" \
     --gpus "$AOT_GPUS" --topologies "$AOT_TOPOLOGIES")
  # The CPU engine that partitions multi-process programs on the GPU
  # machine (--part multiprocess), the build requirements' release, packed
  # with xz (Python's lzma unpacks it there).
  engine_so="$("$vpy" -c "import lammps_jax_pjrt_cpu as p; print(p.PLUGIN_PATH)")"
  mkdir "$kit/engine"
  xz -9 -T0 -c "$engine_so" >"$kit/engine/$(basename "$engine_so").xz"
  "$vpy" -c "import importlib.metadata as m; print('lammps-jax-pjrt-cpu', m.version('lammps-jax-pjrt-cpu'))" \
    >"$kit/engine/RELEASE"
  # The collectives benchmark's baseline, built as the wheel is (its CMake
  # build type, this venv's compiler flags and Gloo).
  raw_gloo="$(PATH="$work/venv/bin:$PATH" "$vpy" bench/collectives.py --build-raw-gloo "$work/bench-build")"
  install -D -m 755 -s "$raw_gloo" "$kit/bin/raw_gloo_allreduce"
  # --part scale's load generator (the coordination codec alone).
  PATH="$work/venv/bin:$PATH" cmake -S . -B "$work/scale-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$vpy" >/dev/null
  PATH="$work/venv/bin:$PATH" cmake --build "$work/scale-build" --target coordination_scale >/dev/null
  install -D -m 755 -s "$work/scale-build/coordination_scale" "$kit/bin/coordination_scale"
  # Every library the wheel's .so files and the baseline load from outside
  # the wheel and the base system, as the Debian packages that hold them.
  base="libc6 libgcc-s1 libstdc++6 zlib1g"
  libs="$(for so in "$work"/unpacked/jax_plugin/*.so "$kit"/bin/*; do
            LD_LIBRARY_PATH="$work/unpacked/jax_plugin" ldd "$so"; done |
          awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)"
  pkgs=""
  for lib in $libs; do
    case "$lib" in "$work"/*) continue ;; esac
    pkg="$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null)" ||
      { echo "no Debian package holds $lib" >&2; exit 1; }
    pkg="${pkg%%:*}"
    case " $base " in *" $pkg "*) continue ;; esac
    pkgs="$pkgs $pkg"
  done
  pkgs="$(echo "$pkgs" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
  echo "Debian packages the wheel and bin/ need beyond the base system: $pkgs"
  # shellcheck disable=SC2086
  (cd "$kit/debs" && apt-get download $pkgs)
  "$vpy" -m pip download -q --only-binary=:all: -d "$kit/wheels" pytest pytest-timeout absl-py
  # --part jax-tests: the selected test files, the helpers they import that
  # jax's wheel leaves out, the subsets (selection.json), where they came
  # from; each file must select tests with this jax (collected on the CPU).
  mkdir -p "$kit/jax-tests/tests" "$kit/jax-tests/jax-src"
  for f in "${jax_test_files[@]}"; do install -D -m 644 "$JAX_SOURCE/tests/$f" "$kit/jax-tests/tests/$f"; done
  for f in $JAX_TEST_HELPERS; do
    [ ! -f "$JAX_SOURCE/$f" ] || install -D -m 644 "$JAX_SOURCE/$f" "$kit/jax-tests/jax-src/$f"
  done
  "$vpy" ci/jax_tests.py --write-selection "$kit/jax-tests/selection.json"
  { echo "jax's test files from $JAX_SOURCE"
    git -C "$JAX_SOURCE" log -1 --format='commit %H (%cd)' 2>/dev/null || echo "(not a git checkout)"; } \
    >"$kit/jax-tests/SOURCE"
  "$vpy" -m pip install -q --no-index --find-links "$kit/wheels" absl-py pytest pytest-timeout
  "$vpy" ci/jax_tests.py --python "$vpy" --tests "$kit/jax-tests/tests" --jax-src "$kit/jax-tests/jax-src" \
    --selection "$kit/jax-tests/selection.json" --subset gpu --reference cuda --collect-only --out "$work/jax-tests"
  size_mb=$(( $(du -sk "$kit" | cut -f1) / 1024 ))
  { echo "myplugin GPU test kit, prepared $(date -u +%FT%TZ) on $(uname -n) for jax/jaxlib $GPU_JAX, CUDA 13"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "size: $size_mb MiB"
    (cd "$kit" && find . -type f ! -name MANIFEST.txt -printf '%s\t%p\n' | sort -k2); } >"$kit/MANIFEST.txt"
  cat "$kit/MANIFEST.txt"
  [ "$size_mb" -lt "$KIT_LIMIT_MB" ] || { echo "the kit is $size_mb MiB, over $KIT_LIMIT_MB MiB" >&2; exit 1; }
  echo "gpu_tests.sh: kit ready in $kit ($size_mb MiB)"
  exit 0
fi

mkdir -p "$out"
out="$(cd "$out" && pwd)"

# ---------------------------------------------------------------- --offline
if [ "$mode" = offline ]; then
  [ -d "$kit" ] || { echo "--offline: no kit at $kit (make one with --prepare on a networked machine)" >&2; exit 2; }
  kit="$(cd "$kit" && pwd)"
  export PYTHONUNBUFFERED=1
  failed=""
  summary="$out/summary.txt"
  : >"$summary"
  note() { echo "$*" | tee -a "$summary"; }
  # What the machine must bring itself; missing pieces are named, not guessed.
  python3 - >"$out/environment.txt" 2>&1 <<PY || true
import importlib.metadata as md, importlib.util, os, platform, sys
import datetime
print("date:", datetime.datetime.now(datetime.timezone.utc).isoformat())
print("python:", sys.version.split()[0], sys.executable, "| machine:", platform.platform())
for dist in ("jax", "jaxlib", "jax-cuda13-pjrt", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda12-plugin",
             "nvidia-nccl-cu13", "nvidia-nccl-cu12", "numpy", "ml_dtypes", "pytest", "pytest-timeout"):
  try:
    print(f"{dist}: {md.version(dist)}")
  except md.PackageNotFoundError:
    print(f"{dist}: absent")
missing = []
try:
  if md.version("jaxlib") != "$GPU_JAX":
    missing.append(f"jaxlib {md.version('jaxlib')}: the kit's wheel was built for $GPU_JAX")
except md.PackageNotFoundError:
  missing.append("jaxlib (pip install jax==$GPU_JAX jaxlib==$GPU_JAX)")
def importable(module):
  try:
    return importlib.util.find_spec(module) is not None
  except ImportError:  # its parent package is absent
    return False
if not any(importable(m) for m in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")):
  missing.append("XLA's CUDA engine (jax-cuda13-pjrt $GPU_JAX)")
nccl = importable("nvidia.nccl") and os.path.exists(
    os.path.join(list(importlib.import_module("nvidia.nccl").__path__)[0], "lib", "libnccl.so.2"))
if not nccl:
  missing.append("libnccl.so.2 from nvidia-nccl-cu13 (the NCCL tests will fail; set MYPLUGIN_NCCL_PATH to another)")
for m in missing:
  print("MISSING:", m)
PY
  { echo "nproc: $(nproc)"; lscpu 2>&1 || true; } >>"$out/environment.txt"
  cat "$out/environment.txt"
  if [ "$part" = gpu ]; then
    grep -h "^MISSING" "$out/environment.txt" >>"$summary" || true
    if command -v nvidia-smi >/dev/null; then
      { nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } >"$out/nvidia-smi.txt" 2>&1 || true
      # What CUDA reports of the device (checks plugin/engine/gpu_target.cc's table), where CuPy is installed.
      python3 -c "import cupy; p = cupy.cuda.runtime.getDeviceProperties(0); print({k: p[k] for k in ('name', 'totalGlobalMem', 'multiProcessorCount', 'l2CacheSize', 'clockRate', 'sharedMemPerMultiprocessor', 'sharedMemPerBlockOptin', 'maxThreadsPerMultiProcessor', 'major', 'minor', 'memoryClockRate', 'memoryBusWidth') if k in p})" >>"$out/nvidia-smi.txt" 2>&1 || true
    else
      echo "nvidia-smi is not on PATH" >"$out/nvidia-smi.txt"
    fi
  elif [ "$part" = collectives ] && [ ! -x "$kit/bin/raw_gloo_allreduce" ]; then
    note "FAILED: the kit has no bin/raw_gloo_allreduce (prepared by an older gpu_tests.sh: --prepare it again)"; exit 1
  elif [ "$part" = scale ] && [ ! -x "$kit/bin/coordination_scale" ]; then
    note "FAILED: the kit has no bin/coordination_scale (prepared by an older gpu_tests.sh: --prepare it again)"; exit 1
  elif [ "$part" = jax-tests ]; then
    [ "$dry" = 1 ] || grep -h "^MISSING" "$out/environment.txt" >>"$summary" || true
    [ -f "$kit/jax-tests/selection.json" ] ||
      { note "FAILED: the kit has no jax-tests/ (prepared by an older gpu_tests.sh: --prepare it again, with JAX_SOURCE)"; exit 1; }
  elif [ "$part" = multiprocess ] || [ "$part" = fsdp ]; then
    grep -h "^MISSING" "$out/environment.txt" >>"$summary" || true
    engine_xz=""
    for f in "$kit"/engine/*.so.xz; do [ ! -f "$f" ] || engine_xz="$f"; done
    [ -n "$engine_xz" ] ||
      { note "FAILED: the kit has no engine/ (prepared by an older gpu_tests.sh: --prepare it again)"; exit 1; }
  fi

  site="$(mktemp -d)/site"
  # The dry run of --part jax-tests runs the installed myplugin (its CPU engine): no wheel.
  [ "$dry" = 1 ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$kit"/myplugin-*.whl
  [ "$part" = collectives ] || [ "$part" = scale ] || python3 -c "import pytest, pytest_timeout" 2>/dev/null ||
    python3 -m pip install -q --no-index --find-links "$kit/wheels" --no-compile --target "$site" pytest pytest-timeout
  # jax's test files import absl's test harness (not a dependency of jax).
  [ "$part" != jax-tests ] || python3 -c "import absl.testing" 2>/dev/null ||
    python3 -m pip install -q --no-index --find-links "$kit/wheels" --no-compile --target "$site" absl-py
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
  # The libraries the wheel and bin/ load that this system lacks (libgloo...), from the .debs.
  loaded=()
  [ "$dry" = 1 ] || loaded+=("$site"/jax_plugin/*.so)
  [ ! -d "$kit/bin" ] || loaded+=("$kit"/bin/*)
  missing_libraries() {
    [ ${#loaded[@]} -gt 0 ] || return 0
    LD_LIBRARY_PATH="$site/jax_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "${loaded[@]}" | grep "not found" | sort -u || true
  }
  if [ -n "$(missing_libraries)" ]; then
    note "unpacking the kit's .debs for: $(missing_libraries | awk '{print $1}' | tr '\n' ' ')"
    prefix="$(mktemp -d)"
    for deb in "$kit"/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
    export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  if [ -n "$(missing_libraries)" ]; then
    note "FAILED: missing even with the kit's .debs: $(missing_libraries | tr '\n' ' ')"; exit 1
  fi
  cd "$(mktemp -d)"  # away from the checkout: imports must find the installed jax_plugin
  root="$OLDPWD"
  if [ "$part" = multiprocess ] || [ "$part" = fsdp ]; then
    # The partitioner of multi-process programs: the kit's CPU engine,
    # unpacked with Python's lzma (no xz needed there).
    shadow="$(mktemp -d)/$(basename "${engine_xz%.xz}")"
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
      "$engine_xz" "$shadow"
  fi
  if [ "$part" = fsdp ]; then
    set +e
    start=$SECONDS
    MYPLUGIN_ENGINE=cuda MYPLUGIN_SHADOW_ENGINE_PATH="$shadow" timeout -k 20 "$FSDP_TIMEOUT_S" \
      python3 "$root/bench/gpu_multiprocess.py" "${FSDP_BENCH[@]}" --profile "$(mktemp -d)" \
      --json "$out/fsdp.json" >"$out/bench-fsdp.txt" 2>&1
    rc=$?
    set -e
    cat "$out/bench-fsdp.txt"
    note "bench/gpu_multiprocess.py (FSDP, 2 processes): rc=$rc in $((SECONDS - start)) s"
    grep -E "^GOAL|FSDP profile" "$out/bench-fsdp.txt" >>"$summary" || true
    [ $rc = 0 ] || { note "FAILED: bench-fsdp(rc=$rc)"; exit 1; }
    note "gpu_tests.sh --offline --part fsdp: done (results in $out)"
    exit 0
  fi
  if [ "$part" = multiprocess ]; then
    has_nccl_backend "$site/jax_plugin/libmyplugin_runtime.so" || failed="$failed nccl-backend"
    [ -d "$kit/aot" ] || note "the kit has no aot/: the compiled-elsewhere executables are skipped"
    set +e
    start=$SECONDS
    # tests/proc.py gives the children none of the parent's MYPLUGIN_*
    # variables: the tests pass these two on themselves.
    MYPLUGIN_ENGINE=cuda MYPLUGIN_SHADOW_ENGINE_PATH="$shadow" MYPLUGIN_GPU_KIT_AOT="$kit/aot" \
      timeout -s INT -k 20 "$MULTIPROCESS_TIMEOUT_S" pytest -v -p no:cacheprovider --timeout "$MULTIPROCESS_TEST_TIMEOUT_S" \
      -m gpu "$root/tests/gpu/test_nccl_shared_gpu.py" --junitxml="$out/multiprocess-tests.xml" -o junit_family=xunit2 \
      >"$out/multiprocess-tests.log" 2>&1
    rc=$?
    set -e
    tail -n 60 "$out/multiprocess-tests.log"
    note "pytest: $(grep -Eo '[0-9]+ (passed|failed|skipped|error)[^=]*' "$out/multiprocess-tests.log" | tail -n 1) in $((SECONDS - start)) s"
    grep -E "^(FAILED|ERROR) " "$out/multiprocess-tests.log" >>"$summary" || true
    # All skipped is no result (no GPU or CUDA engine found: the log says which).
    grep -Eq "[0-9]+ passed" "$out/multiprocess-tests.log" || failed="$failed no-test-passed"
    # SIGINT at the limit: pytest stops, and still writes its XML and summary.
    [ $rc = 0 ] || failed="$failed multiprocess-tests(rc=$rc$([ $rc != 124 ] && [ $rc != 2 ] || echo ": over ${MULTIPROCESS_TIMEOUT_S} s?"))"
    if [ -n "$failed" ]; then note "FAILED:$failed"; exit 1; fi
    note "gpu_tests.sh --offline --part multiprocess: all passed (results in $out)"
    exit 0
  fi
  if [ "$part" = jax-tests ]; then
    # On a GPU: the GPU subset, myplugin over the CUDA engine against jax's
    # cuda backend, every test on both. Dry run: the CPU subset, myplugin's
    # CPU engine against jax's CPU backend, every test on both too.
    if [ "$dry" = 1 ]; then subset=(--subset dry-run --reference cpu --full-reference)
    else subset=(--subset gpu --reference cuda); fi
    runs="$(mktemp -d)"
    set +e
    start=$SECONDS
    timeout -k 15 "$JAX_TESTS_TIMEOUT_S" python3 "$root/ci/jax_tests.py" --python python3 --tests "$kit/jax-tests/tests" \
      --jax-src "$kit/jax-tests/jax-src" --selection "$kit/jax-tests/selection.json" "${subset[@]}" \
      --out "$runs" >"$out/jax-tests.log" 2>&1
    rc=$?
    set -e
    cat "$out/jax-tests.log"
    # Four files back: the shares, the table, the driver's log, every run's log and junit file.
    [ ! -f "$runs/shares.json" ] || cp "$runs/shares.json" "$out/jax-tests.json"
    [ ! -f "$runs/shares.md" ] || cp "$runs/shares.md" "$out/jax-tests.md"
    tar -czf "$out/jax-tests-runs.tar.gz" -C "$runs" . 2>/dev/null || true
    { [ ! -f "$kit/jax-tests/SOURCE" ] || cat "$kit/jax-tests/SOURCE"; cat "$out/jax-tests.md" 2>/dev/null; } >>"$summary"
    grep -E "^no result: " "$out/jax-tests.log" >>"$summary" || true
    note "jax's test files: $((SECONDS - start)) s"
    if [ $rc != 0 ]; then
      note "FAILED: ci/jax_tests.py (rc=$rc$([ $rc != 124 ] || echo ": over ${JAX_TESTS_TIMEOUT_S} s"))"; exit 1
    fi
    note "gpu_tests.sh --offline --part jax-tests$([ "$dry" = 0 ] || echo " --dry-run"): shares recorded (results in $out)"
    exit 0
  fi
  # A benchmark part: bench/BENCH with its arguments under LIMIT seconds,
  # its output in $out/LOG after the command, the lines matching LINES in
  # the summary. The benchmarks run on the CPU: no engine, GPU or NCCL.
  bench_part() {
    local log="$1" lines="$2" limit="$3" bench="$4"
    shift 4
    set +e
    echo "+ bench/$bench $* (timeout $limit s)" >"$out/$log"
    timeout -k 15 "$limit" python3 "$root/bench/$bench" "$@" >>"$out/$log" 2>&1
    local rc=$?
    set -e
    cat "$out/$log"
    grep -E "$lines" "$out/$log" >>"$summary" || true
    if [ $rc != 0 ]; then note "FAILED: bench/$bench (rc=$rc$([ $rc != 124 ] || echo ": over $limit s"))"; exit 1; fi
    note "gpu_tests.sh --offline --part $part: done (results in $out)"
    exit 0
  }
  # The service is the kit's wheel's (myplugin-coordinator), the simulated
  # processes the kit's generator.
  [ "$part" != scale ] || bench_part bench-scale.txt "^\| ours" "$SCALE_TIMEOUT_S" coordination_scale.py \
    "${SCALE_BENCH[@]}" --generator "$kit/bin/coordination_scale" --json "$out/bench-scale.jsonl"
  [ "$part" != collectives ] || bench_part bench-collectives.txt "^(host|memcpy|goal)" "$COLLECTIVES_TIMEOUT_S" \
    collectives.py "${COLLECTIVES_BENCH[@]}" "${bench_args[@]}" --raw-gloo "$kit/bin/raw_gloo_allreduce"
  has_nccl_backend "$site/jax_plugin/libmyplugin_runtime.so" || failed="$failed nccl-backend"
  set +e
  MYPLUGIN_ENGINE=cuda timeout 330 pytest -v -p no:cacheprovider --timeout 150 -m gpu "$root/tests/gpu" \
    -k 'not multiprocess and not shared_gpu' \
    --junitxml="$out/gpu-tests.xml" -o junit_family=xunit2 >"$out/gpu-tests.log" 2>&1
  rc=$?
  tail -n 40 "$out/gpu-tests.log"
  [ $rc = 0 ] || failed="$failed gpu-tests(rc=$rc)"
  # The kit's executables, compiled on a machine with no GPU, loaded and run here.
  if [ -d "$kit/aot" ]; then
    JAX_PLATFORMS=myplugin MYPLUGIN_ENGINE=cuda timeout 120 python3 "$root/tests/programs/gpu_aot_artifacts.py" check \
      "$kit/aot" >"$out/aot.txt" 2>&1
    rc=$?
    cat "$out/aot.txt"
    [ $rc = 0 ] || failed="$failed aot(rc=$rc)"
  else
    note "the kit has no aot/ (prepared by an older gpu_tests.sh): the compiled-elsewhere executables were not run"
  fi
  MYPLUGIN_ENGINE=cuda timeout 150 python3 "$root/bench/gpu.py" >"$out/bench-gpu.txt" 2>&1
  rc=$?
  cat "$out/bench-gpu.txt"
  [ $rc = 0 ] || failed="$failed bench(rc=$rc)"
  set -e
  note "pytest: $(grep -Eo '[0-9]+ (passed|failed|skipped|error)[^=]*' "$out/gpu-tests.log" | tail -n 1)"
  if [ -n "$failed" ]; then note "FAILED:$failed"; exit 1; fi
  note "gpu_tests.sh --offline: all passed (results in $out)"
  exit 0
fi

# ---------------------------------------------------------------- online (CI)
# Runs a command that needs a GPU (or changes the machine); in a dry run,
# only says it would.
gpu() {
  echo "+ $*"
  if [ "$dry" = 0 ]; then "$@"; fi
}
# Runs a command that needs no GPU, dry run or not.
always() {
  echo "+ $*"
  "$@"
}

always python3 --version
always python3 -c "import sys; assert sys.version_info >= (3, 11), sys.version"
for tool in bash pip pytest; do always command -v "$tool"; done
# The CUDA engine matching the jaxlib that this Python resolves is on the index.
always python3 - "$cuda" <<'PY'
import subprocess, sys
want = "0.10.2" if sys.version_info < (3, 12) else "0.11.2"
name = f"jax-cuda{sys.argv[1]}-pjrt"
out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                     timeout=300)
if out.returncode != 0 or want not in out.stdout:
  sys.exit(f"{name} {want} is not on the package index: " + (out.stdout + out.stderr)[-500:])
print(f"{name} {want}: available")
PY

gpu sudo apt-get install -y -qq --no-install-recommends ccache binutils libgloo-dev libasio-dev
# Not an isolated build: CUDA's headers must be importable for the NCCL backend.
mapfile -t reqs < <(build_requirements python3)
# shellcheck disable=SC2046
gpu pip install "${reqs[@]}" cmake ninja $(cuda_headers "$cuda") pytest pytest-timeout
gpu pip install --no-build-isolation ".[cuda$cuda]"
gpu bash -c "nvidia-smi | tee '$out/nvidia-smi.txt'"
gpu bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee '$out/gpus.csv'"

# The tests marked gpu: they must be collected here, GPU or not.
always pytest -q --collect-only -m gpu tests/gpu >"$out/collected.txt"
grep -q "test_" "$out/collected.txt" || { echo "no GPU test was collected" >&2; exit 1; }
# Issue 39's processes sharing one GPU (--offline --part multiprocess there).
grep -q "test_nccl_shared_gpu.py::test_every_collective_through_shard_map_pmap_and_jit\[4\]" "$out/collected.txt" ||
  { echo "the shared-GPU tests (tests/gpu/test_nccl_shared_gpu.py) were not collected with the gpu marker" >&2; exit 1; }
always python3 tests/programs/gpu_aot_artifacts.py --help >/dev/null
# --part jax-tests: its subsets, and the GPU one's worst case within its budget.
always python3 ci/jax_tests.py --subset gpu --plan --budget "$JAX_TESTS_BUDGET_S"
always python3 ci/jax_tests.py --subset dry-run --plan
gpu bash -c "MYPLUGIN_ENGINE=cuda pytest -v -m gpu tests/gpu -k 'not multiprocess and not shared_gpu' --junitxml='$out/gpu-tests.xml' 2>&1 | tee '$out/gpu-tests.log'"
gpu bash -c "MYPLUGIN_ENGINE=cuda timeout $MULTIPROCESS_TIMEOUT_S pytest -v --timeout $MULTIPROCESS_TEST_TIMEOUT_S -m gpu tests/gpu/test_nccl_shared_gpu.py --junitxml='$out/multiprocess-tests.xml' 2>&1 | tee '$out/multiprocess-tests.log'"
if [ "$leg" = multi ]; then
  gpu bash -c "MYPLUGIN_ENGINE=cuda pytest -v -m gpu tests/gpu -k multiprocess --junitxml='$out/nccl-tests.xml' 2>&1 | tee '$out/nccl-tests.log'"
fi

# The benchmarks: myplugin against jax's own CUDA plugin, and the all-reduce
# over host collectives (the NCCL bandwidth test is in tests/gpu).
always python3 bench/gpu.py --help >/dev/null
gpu bash -c "MYPLUGIN_ENGINE=cuda python3 bench/gpu.py 2>&1 | tee '$out/bench-gpu.txt'"
always python3 bench/collectives.py --help >/dev/null
# The offline collectives part's arguments, parsed (it runs nothing).
always python3 bench/collectives.py "${COLLECTIVES_BENCH[@]}" --raw-gloo gpu-kit/bin/raw_gloo_allreduce --plan
gpu bash -c "python3 bench/collectives.py ${COLLECTIVES_BENCH[*]} 2>&1 | tee '$out/bench-collectives.txt'"
# The coordination service at scale (--part scale offline): its arguments parsed.
always python3 bench/coordination_scale.py --help >/dev/null
# --part fsdp: the benchmark's arguments, parsed.
always python3 bench/gpu_multiprocess.py "${FSDP_BENCH[@]}" --profile /tmp --help >/dev/null
echo "gpu_tests.sh: done (leg $leg, CUDA $cuda, dry run $dry, results in $out)"

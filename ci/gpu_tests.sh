#!/usr/bin/env bash
# The GPU job of ci/github/gpu.yml, on a machine with NVIDIA GPUs:
#   build with the CUDA extra, record nvidia-smi, run the tests marked gpu,
#   the multi-process NCCL tests (one process per GPU, --leg multi), and
#   the all-reduce benchmark, keeping every log in --out.
#
# usage: ci/gpu_tests.sh [--leg single|multi] [--out DIR] [--dry-run]
#
# --dry-run runs everything that needs no GPU (argument checks, tool
# checks, the CUDA engine's availability on the package index, test
# collection with the gpu marker, the benchmark's argument parsing) and
# prints the GPU commands instead of running them. .ci/run calls it so.
set -euo pipefail
cd "$(dirname "$0")/.."

leg=single
out=gpu-results
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --leg) leg="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "usage: $0 [--leg single|multi] [--out DIR] [--dry-run]" >&2; exit 2 ;;
  esac
done
case "$leg" in single|multi) ;; *) echo "--leg must be single or multi, not '$leg'" >&2; exit 2 ;; esac
mkdir -p "$out"

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
always python3 -c "import sys; assert sys.version_info >= (3, 10), sys.version"
for tool in bash pip pytest; do always command -v "$tool"; done
# The CUDA engine matching the jaxlib that this Python resolves is on the index.
always python3 - <<'PY'
import json, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "jax-cuda12-pjrt"],
                     capture_output=True, text=True)
if out.returncode != 0 or "0.10.2" not in out.stdout:
  sys.exit("jax-cuda12-pjrt 0.10.2 is not on the package index: " + (out.stdout + out.stderr)[-500:])
print("jax-cuda12-pjrt 0.10.2: available")
PY

gpu sudo apt-get install -y -qq --no-install-recommends ccache binutils libgloo-dev
gpu pip install '.[test,cuda12]'
gpu bash -c "nvidia-smi | tee '$out/nvidia-smi.txt'"
gpu bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee '$out/gpus.csv'"

# The tests marked gpu: they must be collected here, GPU or not.
always pytest -q --collect-only -m gpu tests/gpu >"$out/collected.txt"
grep -q "test_" "$out/collected.txt" || { echo "no GPU test was collected" >&2; exit 1; }
gpu bash -c "MYPLUGIN_ENGINE=cuda pytest -v -m gpu tests/gpu -k 'not multiprocess' --junitxml='$out/gpu-tests.xml' 2>&1 | tee '$out/gpu-tests.log'"
if [ "$leg" = multi ]; then
  gpu bash -c "MYPLUGIN_ENGINE=cuda pytest -v -m gpu tests/gpu -k multiprocess --junitxml='$out/nccl-tests.xml' 2>&1 | tee '$out/nccl-tests.log'"
fi

# The all-reduce benchmark (host collectives; the NCCL bandwidth test is in tests/gpu).
always python3 bench/collectives.py --help >/dev/null
gpu bash -c "python3 bench/collectives.py --processes 2 --rounds 2 --max-mb 64 2>&1 | tee '$out/bench-collectives.txt'"
echo "gpu_tests.sh: done (leg $leg, dry run $dry, results in $out)"

#!/usr/bin/env bash
# One command for a session lent the GPU machine (see ../shared/gpu.md): the GPU tests, the tests under
# compute-sanitizer, and the benchmarks, with every log written to $OUT (or ./gpu-out).
#
# Beforehand, on the development machine, fetch the wheels the GPU machine lacks into .whl/ (ignored):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl numpy==2.4.6 nvidia-cuda-sanitizer-api
# then run this script there with .whl carried:  bash bench/gpu_session.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site && python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
export SIMT_PTO_A5_BACKEND=gpu PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"

gpu_tests="tests/test_a5_gather.py tests/test_a5_scatter.py tests/test_a5_launch.py tests/test_large.py tests/test_l1.py"
python3 -m pytest -q -p no:cacheprovider $gpu_tests 2>&1 | tail -5 | tee "$out/gpu_tests.txt"

san=$(ls /tmp/site/nvidia/cu*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$san" ]; then
  chmod +x "$san"
  "$san" --tool memcheck --error-exitcode 99 --print-limit 20 --target-processes all \
    python3 -m pytest -q -p no:cacheprovider -x $gpu_tests > "$out/sanitizer_memcheck.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$out/gpu_tests.txt"
  tail -3 "$out/sanitizer_memcheck.log" | tee -a "$out/gpu_tests.txt"
else
  echo "compute-sanitizer: not found (carry the nvidia-cuda-sanitizer-api wheel)" | tee -a "$out/gpu_tests.txt"
fi

python3 bench/bench_large.py "$@" 2>&1 | tee "$out/bench_large.md"
python3 bench/coalescing_bench.py --quick --out "$out" 2>&1 | tail -40 | tee "$out/coalescing_bench.txt"
python3 -m simt_pto.host.cli validate-last --repeat 3 2>&1 | tail -20 | tee "$out/validate_last.txt"

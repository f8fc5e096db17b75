#!/usr/bin/env bash
# The GPU work on a machine with a CUDA GPU and no network (a remote machine reached one command at a time),
# in stages that each fit one command of 10 minutes at most, with every log written to $OUT (or ./gpu-out):
#
#   bash bench/gpu_session.sh tests [F]  # the A5 test modules (or the files F) on the GPU (compiles each kernel once)
#   bash bench/gpu_session.sh sanitize   # the same under compute-sanitizer memcheck (a float32 / int8 subset)
#   bash bench/gpu_session.sh bench      # bench_large.py, gpu_call_overhead.py, coalescing_bench.py --quick,
#                                        # validate-last
#   bash bench/gpu_session.sh counters   # the coalescing model against the GPU's own counters (CUPTI, in process):
#                                        # tests/test_gpu_counters.py, coalescing_bench.py --quick --counters cupti
#   bash bench/gpu_session.sh selftest   # simt-pto selftest --backend gpu (the full matrix, worker processes
#                                        # compiling in parallel), timed from whatever kernel cache is there
#   bash bench/gpu_session.sh all        # all five, for a machine without the 10-minute limit
#
# Issue 39 in one command of a fresh machine (a cold kernel cache: the selftest's time is a first run's):
#   OUT=... SELFTEST_TIMEOUT=300 COUNTERS_TIMEOUT=130 bash -c 'bench/gpu_session.sh selftest; bench/gpu_session.sh counters'

#
# Numba's on-disk cache (kernels/**/__pycache__) stays on a warm machine between commands, so run `tests`
# first: later stages then reuse its compiled kernels.
#
# Knobs (environment), for a lease shorter than the stages' defaults:
#   GPU_TEST_WORKERS  pytest-xdist workers for `tests` (default 8: the cold kernel compiles run in parallel)
#   TESTS_TIMEOUT, SANITIZE_TIMEOUT  seconds for `tests`, `sanitize` (default 560 each); a stage that runs out is
#                     interrupted (SIGINT), so pytest still prints what failed so far
#   BENCH_TIMEOUT, COALESCE_TIMEOUT, VALIDATE_TIMEOUT  seconds for the three parts of `bench` (300, 180, 100)
#   SANITIZE_K        the -k filter of the memcheck run
#   COUNTERS_TIMEOUT  seconds for each of the two parts of `counters` (default 240)
#   SELFTEST_TIMEOUT  seconds for `selftest` (default 330); SELFTEST_JOBS its worker processes (default: selftest's)
#   BENCH_QUICK=1     bench_large.py --quick
#   COALESCE_ARGS     more arguments of coalescing_bench.py (e.g. --no-ncu: no Nsight Compute pass, much shorter)
#
# Beforehand, on the development machine, fetch the wheels the GPU machine lacks into .whl/ (ignored):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_25_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl numpy==2.4.6 nvidia-cuda-cupti==13.0.85 nvidia-cuda-sanitizer-api
# and carry .whl with every command (44 MB of the 64 MiB a command carries). CUPTI 13.0 is the CUDA of the machines'
# driver (580): a newer CUPTI's target side may refuse an older driver.
#
# The logs come back in $OUT; keep them in the tracked folder bench/gpu-logs/ (bench/gpu-logs/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
shift || true
out=${OUT:-gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site && python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
export SIMT_PTO_A5_BACKEND=gpu PYTHONUNBUFFERED=1

gpu_tests="tests/test_a5_gather.py tests/test_a5_scatter.py tests/test_a5_launch.py tests/test_large.py
           tests/test_l1.py tests/test_device_arrays.py"
if [ $# -gt 0 ]; then gpu_tests="$*"; fi

run_tests() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  date -u | tee -a "$out/gpu.txt"
  timeout -s INT -k 20 "${TESTS_TIMEOUT:-560}" python3 -m pytest -q -p no:cacheprovider -rs --durations=15 \
    -n "${GPU_TEST_WORKERS:-8}" $gpu_tests > "$out/gpu_tests.log" 2>&1
  echo "pytest rc=$?" >> "$out/gpu_tests.log"
  tail -40 "$out/gpu_tests.log"
}

run_sanitize() {
  local san
  # the carried wheel's, else the machine's own
  san=$(ls /tmp/site/nvidia/cu*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$san" ] || san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$san" ]; then
    echo "compute-sanitizer: not found (carry the nvidia-cuda-sanitizer-api wheel)" | tee "$out/sanitizer.txt"
    return
  fi
  chmod +x "$san" 2>/dev/null
  echo "$san" > "$out/sanitizer.txt"
  timeout -s INT -k 20 "${SANITIZE_TIMEOUT:-560}" "$san" --tool memcheck --error-exitcode 99 --print-limit 20 \
    --target-processes all python3 -m pytest -q -p no:cacheprovider $gpu_tests \
    -k "${SANITIZE_K:-float32 or int8 or device or last or owner}" \
    > "$out/sanitizer_memcheck.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$out/sanitizer.txt"
  grep -E "ERROR SUMMARY|passed|failed" "$out/sanitizer_memcheck.log" | tail -5 | tee -a "$out/sanitizer.txt"
}

run_bench() {
  timeout -k 10 "${BENCH_TIMEOUT:-300}" python3 bench/bench_large.py ${BENCH_QUICK:+--quick} 2>&1 \
    | tee "$out/bench_large.md"
  timeout -k 10 "${BENCH_TIMEOUT:-300}" python3 bench/gpu_call_overhead.py 2>&1 | tee "$out/gpu_call_overhead.md"
  timeout -k 10 "${COALESCE_TIMEOUT:-180}" python3 bench/coalescing_bench.py --quick ${COALESCE_ARGS:-} --out "$out" > "$out/coalescing_bench.txt" 2>&1
  echo "coalescing_bench rc=$?" >> "$out/coalescing_bench.txt"
  tail -30 "$out/coalescing_bench.txt"
  timeout -k 10 "${VALIDATE_TIMEOUT:-100}" python3 -m simt_pto.host.tools.cli validate-last --repeat 3 2>&1 | tail -20 | tee "$out/validate_last.txt"
}

run_counters() {
  # which CUPTI loads (the carried wheel's comes first on PYTHONPATH), then the tests and the quick matrix
  python3 -c 'from simt_pto.host.tools import gpu_counters as g; print(g.library_candidates()); g.require(); print("ok")' \
    > "$out/counters.txt" 2>&1
  timeout -s INT -k 10 "${COUNTERS_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu_counters.py \
    >> "$out/counters.txt" 2>&1
  echo "pytest rc=$?" >> "$out/counters.txt"
  tail -15 "$out/counters.txt"
  timeout -k 10 "${COUNTERS_TIMEOUT:-240}" python3 bench/coalescing_bench.py --quick --counters cupti --no-peers \
    --repeats 1 --out "$out" > "$out/coalescing_counters.txt" 2>&1
  echo "coalescing_bench rc=$?" >> "$out/coalescing_counters.txt"
  tail -25 "$out/coalescing_counters.txt"
}

run_selftest() {
  local t0 cached
  cached=$(find kernels -name '*.nbi' 2>/dev/null | wc -l)
  t0=$(date +%s)
  timeout -s INT -k 20 "${SELFTEST_TIMEOUT:-330}" python3 -m simt_pto.host.tools.cli selftest --backend gpu \
    ${SELFTEST_JOBS:+--jobs "$SELFTEST_JOBS"} --json > "$out/selftest_gpu.log" 2>&1
  echo "selftest rc=$? in $(( $(date +%s) - t0 )) s; $cached kernel cache index files before it" \
    | tee -a "$out/selftest_gpu.log"
  grep -v '^{' "$out/selftest_gpu.log" | tail -20
}

case "$stage" in
  tests) run_tests ;;
  sanitize) run_sanitize ;;
  bench) run_bench ;;
  counters) run_counters ;;
  selftest) run_selftest ;;
  all) run_selftest; run_tests; run_sanitize; run_bench; run_counters ;;
  *) echo "usage: bash bench/gpu_session.sh tests|sanitize|bench|counters|selftest|all" >&2; exit 2 ;;
esac

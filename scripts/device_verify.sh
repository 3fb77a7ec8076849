#!/usr/bin/env bash
# One device call that verifies the sm_90a kernels (run from the checkout root on the GPU machine):
#   bash .device/run.sh bash scripts/device_verify.sh            (logs under $OUT, or /tmp/out)
# GPU 0: the GPU test suite. GPU 1 (if present): compute-sanitizer memcheck of every stage with
# unchecked bad offsets, racecheck and synccheck of the warp-specialized stages. Both in parallel.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
ngpu=$(nvidia-smi -L | wc -l)
second=$(( ngpu > 1 ? 1 : 0 ))
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/gpu.txt"
(
  CUDA_VISIBLE_DEVICES=0 timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider \
    tests/test_kernels_sm90_gpu.py tests/test_kernels_host_offsets_gpu.py "$@" > "$OUT/pytest_gpu.log" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest_gpu.log"
) &
(
  export CUDA_VISIBLE_DEVICES=$second
  timeout 400 $SAN --tool memcheck --report-api-errors no python3 scripts/memcheck_kernels.py > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?" >> "$OUT/memcheck.log"
  for tool in racecheck synccheck; do
    timeout 120 $SAN --tool $tool --report-api-errors no python3 scripts/memcheck_kernels.py 3 4 6 7 > "$OUT/$tool.log" 2>&1
    echo "$tool exit $?" >> "$OUT/$tool.log"
  done
) &
wait
tail -n 3 "$OUT/pytest_gpu.log"
for f in memcheck racecheck synccheck; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit|guard band intact=False|ok': False" "$OUT/$f.log" | tail -n 4; done

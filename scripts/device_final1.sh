#!/usr/bin/env bash
# The closing device call on a 1-GPU machine (run from the checkout root on the GPU machine):
#   bash .device/run.sh bash scripts/device_final1.sh [h200_session.py arguments]
# First the GPU tests of the kernels and compute-sanitizer (memcheck of every stage with unchecked
# bad offsets; racecheck and synccheck of the warp-specialized stages), then the measuring session
# (scripts/h200_session.py). Logs and results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/gpu.txt"
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  tests/test_kernels_host_offsets_gpu.py tests/test_compile_cache_gpu.py > "$OUT/pytest_gpu.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_gpu.log"
timeout 60 $SAN --tool memcheck --report-api-errors no python3 scripts/memcheck_kernels.py > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?" >> "$OUT/memcheck.log"
for tool in racecheck synccheck; do
  timeout 40 $SAN --tool $tool --report-api-errors no python3 scripts/memcheck_kernels.py 3 7 > "$OUT/$tool.log" 2>&1
  echo "$tool exit $?" >> "$OUT/$tool.log"
done
timeout 330 python3 scripts/h200_session.py --out "$OUT" "$@" > "$OUT/session.log" 2>&1
echo "session exit $?" >> "$OUT/session.log"
tail -n 3 "$OUT/pytest_gpu.log"
for f in memcheck racecheck synccheck; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit|intact=False|ok': False" "$OUT/$f.log" | tail -n 3; done
tail -n 30 "$OUT/session.log"

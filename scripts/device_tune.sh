#!/usr/bin/env bash
# A tuning call on a 1-GPU machine (from the checkout root on the GPU machine):
#   bash .device/run.sh bash scripts/device_tune.sh [h200_session.py arguments]
# The GPU tests of the kernels, compute-sanitizer (memcheck of the 128-row ping-pong with unchecked
# bad offsets; racecheck and synccheck of stages 1, 2, 5 and the 128-row ping-pong), then the
# precompile and tune phases of scripts/h200_session.py. At most 8 files under $OUT (what a call
# returns): gpu.txt, 4 logs, session.log, session.json, tuning_<GPU>.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
PP=7:tile_m=128+tile_n=128
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/gpu.txt"
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  tests/test_kernels_host_offsets_gpu.py tests/test_compile_cache_gpu.py > "$OUT/pytest_gpu.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_gpu.log"
timeout 40 $SAN --tool memcheck --report-api-errors no python3 scripts/memcheck_kernels.py $PP \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?" >> "$OUT/memcheck.log"
for tool in racecheck synccheck; do
  timeout 75 $SAN --tool $tool --report-api-errors no python3 scripts/memcheck_kernels.py 1 2 5 $PP \
    > "$OUT/$tool.log" 2>&1
  echo "$tool exit $?" >> "$OUT/$tool.log"
done
timeout 300 python3 scripts/h200_session.py --out "$OUT" --phases precompile,tune "$@" \
  > "$OUT/session.log" 2>&1
echo "session exit $?" >> "$OUT/session.log"
tail -n 3 "$OUT/pytest_gpu.log"
for f in memcheck racecheck synccheck; do
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit|intact=False|ok': False" "$OUT/$f.log" | tail -n 3
done
tail -n 30 "$OUT/session.log"
ls "$OUT"

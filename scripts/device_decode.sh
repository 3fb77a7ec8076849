#!/usr/bin/env bash
# Swapped-operand kernels on the GPU, then a decode re-tune and the full compare:
#   bash .device/run.sh bash scripts/device_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  -k "swapAB" > "$OUT/pytest_swap.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_swap.log"
tail -n 3 "$OUT/pytest_swap.log"
timeout 480 python3 scripts/h200_session.py --out "$OUT" --phases precompile,tune,compare \
  --tune-tokens 1,16,64,256 --merge-table pearl_moe/tuning/H200.json \
  --quack-tuned-tokens 1,16,64,256,4096 --budget-s 470 --tune-s 130 --compare-s 310 \
  > "$OUT/session.log" 2>&1
echo "session exit $?" >> "$OUT/session.log"
grep -v "it/s\]\|kernel/s\]\|shape/s\]\|problem/s\]" "$OUT/session.log" | tail -n 60

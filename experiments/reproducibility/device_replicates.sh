#!/usr/bin/env bash
# Run-to-run reproducibility: bash experiments/reproducibility/device_replicates.sh
# The same bench run three times, each in a fresh process (new inputs, new CUDA graphs), on one
# machine within minutes: static-schedule kernels that drift (stages 5 and 6, 64-row tiles)
# beside their dynamic twins and two 128-row controls, GLM 5.3 / DeepSeek V4 Pro / Kimi K3 at
# 1024 and 4096 tokens. The SM clock and power are logged every 100 ms beside them.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
  --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
SMI=$!
LIST="pearl-s3,pearl-s3:tile_m=128+tile_n=256+ring_depth=4,pearl-s5,pearl-s5:schedule=dynamic,pearl-s6,pearl-s6:schedule=dynamic"
for i in 1 2 3; do
  echo "== process $i $(date -u +%T)" >> "$OUT/replicates.log"
  timeout 170 python3 -m pearl_moe bench --models all --tokens 1024,4096 --order tokens \
    --impls "$LIST" --rounds 6 --kind replicate --out "$OUT/replicate_$i.json" --deadline-s 150 \
    >> "$OUT/replicates.log" 2>&1
  echo "bench $i exit $? $(date -u +%T)" >> "$OUT/replicates.log"
done
kill $SMI
gzip -9 "$OUT/clocks.csv"
grep -E "^== |exit" "$OUT/replicates.log"; ls -la "$OUT"

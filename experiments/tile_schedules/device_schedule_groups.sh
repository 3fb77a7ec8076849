#!/usr/bin/env bash
# Out-of-sample check of the model's request merging: bash experiments/tile_schedules/device_schedule_groups.sh
# Nsight Compute L2 requests and time of four tile shapes beyond stage 5, static and dynamic, at
# 1024 tokens (experiments/tile_schedules/data/ncu_groups.json): the model merges B boxes within groups of
# four neighbouring CTAs and A boxes within pairs of the static schedule, nothing in the dynamic one.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
IMPLS=()
for b in pearl-s3:tile_m=128+tile_n=128 pearl-s3:tile_m=64+tile_n=64 pearl-s3:tile_m=64+tile_n=256 pearl-s3:tile_m=128+tile_n=64; do
  IMPLS+=("$b" "$b+schedule=dynamic")
done
LIST=$(IFS=,; echo "${IMPLS[*]}")
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second
for spec in "GLM 5.3|1024" "DeepSeek V4 Pro|1024" "Kimi K3|1024"; do
  IFS='|' read -r model tok <<< "$spec"
  timeout 150 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" "${IMPLS[@]}" > "$OUT/ncu_${model// /_}_$tok.csv" 2>> "$OUT/ncu.err"
  echo "ncu $model $tok exit $?" >> "$OUT/ncu.err"
done
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_groups.json" ncu_schedule_groups \
  "experiments/tile_schedules/device_schedule_groups.sh: Nsight Compute, one profiled launch per kernel after two unprofiled ones, clocks left alone, caches flushed" \
  "$LIST" --rows
rm -f "$OUT"/ncu_*_[0-9]*.csv
tail -n 3 "$OUT/ncu.err"

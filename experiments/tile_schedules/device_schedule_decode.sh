#!/usr/bin/env bash
# Do neighbouring CTAs share A boxes at decode? bash experiments/tile_schedules/device_schedule_decode.sh
# Nsight Compute L2 requests and time of stages 2 and 3 (static and dynamic) at 1 and 64 tokens
# (experiments/tile_schedules/data/ncu_decode.json): with one m tile per expert, neighbouring tiles read the
# same A box.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
IMPLS=(pearl-s2 pearl-s3 pearl-s3:schedule=dynamic pearl-s5 pearl-s5:schedule=dynamic)
LIST=$(IFS=,; echo "${IMPLS[*]}")
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second
for spec in "DeepSeek V4 Pro|1" "GLM 5.3|64" "Kimi K3|64"; do
  IFS='|' read -r model tok <<< "$spec"
  timeout 100 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" "${IMPLS[@]}" > "$OUT/ncu_${model// /_}_$tok.csv" 2>> "$OUT/ncu.err"
  echo "ncu $model $tok exit $?" >> "$OUT/ncu.err"
done
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_decode.json" ncu_schedule_decode \
  "experiments/tile_schedules/device_schedule_decode.sh: Nsight Compute, one profiled launch per kernel after two unprofiled ones, clocks left alone, caches flushed" \
  "$LIST" --rows
rm -f "$OUT"/ncu_*_[0-9]*.csv
tail -n 3 "$OUT/ncu.err"

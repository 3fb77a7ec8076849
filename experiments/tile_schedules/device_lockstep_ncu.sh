#!/usr/bin/env bash
# The lockstep schedule, second call: bash experiments/tile_schedules/device_lockstep_ncu.sh
#  1. Nsight Compute (clocks left alone, caches flushed): HBM bytes, L2 requests and hit rate of
#     stages 4-7, static and lockstep, at Kimi K3 / 1024 tokens and the three models at 4096
#     (experiments/tile_schedules/data/ncu_lockstep.json);
#  2. the bench of experiments/tile_schedules/device_lockstep.sh again at 1024 and 4096 tokens in a fresh process
#     (new inputs, new graphs), to see how far each schedule moves between runs
#     (experiments/tile_schedules/data/lockstep_2.json.gz).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
IMPLS=()
for s in 4 5 6 7; do IMPLS+=("pearl-s$s" "pearl-s$s:schedule=lockstep"); done
LIST=$(IFS=,; echo "${IMPLS[*]}")
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,lts__t_requests.sum,lts__t_sectors.sum,lts__t_sector_hit_rate.pct
for spec in "Kimi K3:1024" "GLM 5.3:4096" "DeepSeek V4 Pro:4096" "Kimi K3:4096"; do
  model=${spec%:*}; tok=${spec#*:}
  timeout 100 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" "${IMPLS[@]}" \
    > "$OUT/ncu_${model// /_}_$tok.csv" 2>> "$OUT/ncu.err"
  echo "ncu $spec exit $?" >> "$OUT/ncu.err"
done
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_lockstep.json" ncu_lockstep \
  "experiments/tile_schedules/device_lockstep_ncu.sh: Nsight Compute, one profiled launch per kernel after two unprofiled ones, clocks left alone, caches flushed before each launch (ncu's default)" \
  "$LIST" --rows
rm -f "$OUT"/ncu_*_[0-9]*.csv
grep exit "$OUT/ncu.err"
B=()
for s in 3 4 5 6 7; do B+=("pearl-s$s" "pearl-s$s:schedule=lockstep"); done
BLIST=$(IFS=,; echo "${B[*]}")
timeout 200 python3 -m pearl_moe bench --models all --tokens 1024,4096 --order tokens --impls "$BLIST" \
  --rounds 6 --warmup-replays 3 --kind lockstep --out "$OUT/lockstep_2.json" --deadline-s 180 \
  > "$OUT/lockstep_2.log" 2>&1
echo "bench exit $?" >> "$OUT/lockstep_2.log"
grep -v "compile" "$OUT/lockstep_2.log" | tail -n 12
ls -la "$OUT"

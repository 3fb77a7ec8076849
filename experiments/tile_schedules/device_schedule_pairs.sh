#!/usr/bin/env bash
# Why the dynamic schedule is slower at 1024 tokens: bash experiments/tile_schedules/device_schedule_pairs.sh
# Static, dynamic and scattered schedules (scattered: the static schedule with neighbouring tiles
# on CTAs far apart) of stages 5 and 6 at 1024 and 4096 tokens: interleaved rounds
# (experiments/tile_schedules/data/pairs.json.gz), then Nsight Compute L2 requests, sectors, HBM bytes and time
# (results/H200/profiles/ncu_pairs.json).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  -k "scattered" > "$OUT/pytest_scattered.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_scattered.log"
tail -n 2 "$OUT/pytest_scattered.log"
IMPLS=()
for b in pearl-s5 pearl-s6; do
  IMPLS+=("$b" "$b:schedule=dynamic" "$b:schedule=scattered")
done
LIST=$(IFS=,; echo "${IMPLS[*]}")
timeout 200 python3 -m pearl_moe bench --models all --tokens 1024,4096 --order tokens --impls "$LIST" \
  --rounds 6 --warmup-replays 3 --kind schedule_pairs --out "$OUT/pairs.json" --deadline-s 170 \
  > "$OUT/pairs.log" 2>&1
echo "bench exit $?" >> "$OUT/pairs.log"
grep -v "compile" "$OUT/pairs.log" | tail -n 9
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second
for spec in "GLM 5.3|1024" "DeepSeek V4 Pro|1024" "GLM 5.3|4096"; do
  IFS='|' read -r model tok <<< "$spec"
  timeout 60 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" "${IMPLS[@]}" > "$OUT/ncu_${model// /_}_$tok.csv" 2>> "$OUT/ncu.err"
  echo "ncu $model $tok exit $?" >> "$OUT/ncu.err"
done
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_pairs.json" ncu_schedule_pairs \
  "experiments/tile_schedules/device_schedule_pairs.sh: Nsight Compute, one profiled launch per kernel after two unprofiled ones, clocks left alone, caches flushed" \
  "$LIST" --rows
rm -f "$OUT"/ncu_*_[0-9]*.csv
tail -n 3 "$OUT/ncu.err"

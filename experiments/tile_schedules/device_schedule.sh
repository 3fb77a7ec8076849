#!/usr/bin/env bash
# Static against dynamic tile schedule: bash experiments/tile_schedules/device_schedule.sh
#  1. GPU tests of the dynamic schedule (correctness, counter back at 0, graph replays);
#  2. each kernel with both schedules, interleaved rounds, GLM 5.3 / DeepSeek V4 Pro / Kimi K3 at
#     64, 1024 and 4096 tokens (experiments/tile_schedules/data/schedule.json.gz);
#  3. Nsight Compute (clocks left alone): HBM bytes read and kernel time of both schedules at
#     4096 tokens (experiments/tile_schedules/data/ncu_schedule.json).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  -k "dynamic" > "$OUT/pytest_dynamic.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_dynamic.log"
tail -n 3 "$OUT/pytest_dynamic.log"
BASES=(pearl-s3 pearl-s5 pearl-s6 pearl-s7 "pearl-s3:tile_m=128+tile_n=256+ring_depth=4"
       pearl-s3:tile_m=64+tile_n=64 pearl-s3:tile_m=128+tile_n=64 pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1)
IMPLS=()
for b in "${BASES[@]}"; do
  if [[ $b == *:* ]]; then d="$b+schedule=dynamic"; else d="$b:schedule=dynamic"; fi
  IMPLS+=("$b" "$d")
done
LIST=$(IFS=,; echo "${IMPLS[*]}")
timeout 330 python3 -m pearl_moe bench --models all --tokens 64,1024,4096 --order tokens --impls "$LIST" \
  --rounds 6 --warmup-replays 3 --kind schedule --out "$OUT/schedule.json" --deadline-s 280 \
  > "$OUT/schedule.log" 2>&1
echo "bench exit $?" >> "$OUT/schedule.log"
grep -v "compile" "$OUT/schedule.log" | tail -n 30
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second
for model in "GLM 5.3" "Kimi K3"; do
  echo "== $model 4096" >> "$OUT/ncu.err"
  timeout 60 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" 4096 "${IMPLS[@]}" > "$OUT/ncu_${model// /_}_4096.csv" 2>> "$OUT/ncu.err"
  echo "exit $?" >> "$OUT/ncu.err"
done
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_schedule.json" ncu_schedule \
  "experiments/tile_schedules/device_schedule.sh: Nsight Compute, one profiled launch per kernel after two unprofiled ones, clocks left alone, caches flushed (ncu default)" \
  "$LIST" --rows
rm -f "$OUT"/ncu_*_[0-9]*.csv
tail -n 4 "$OUT/ncu.err"; ls "$OUT"

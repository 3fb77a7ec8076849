#!/usr/bin/env bash
# A profiling call on the GPU machine, before tuning: bash .device/run.sh bash scripts/device_probe.sh
#  1. GPU tests of the 128-row ping-pong variants;
#  2. the mid/prefill candidates against the baselines (interleaved rounds, the SM clock and power
#     logged every 200 ms beside them);
#  3. Nsight Compute (clocks left alone) on GLM 5.3 / Kimi K3 at 1024 tokens and on the stage
#     kernels the calibration misses most (4096 tokens).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/clocks.csv" 2>&1 &
SMI=$!
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  -k "128x128" > "$OUT/pytest_probe.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_probe.log"
PP1="pearl-s7:tile_m=128+tile_n=128+b_k_tiles=1+shift_a_box=true"
PP2="pearl-s7:tile_m=128+tile_n=128+shift_a_box=true"
CO="pearl-s3:tile_m=128+tile_n=256+ring_depth=4"
P64="pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true"
timeout 260 python3 -m pearl_moe bench --models all --tokens 1024,4096 --impls \
  "pearl,grouped_mm,loop,$PP1,$PP2,$CO,$P64" --rounds 7 --warmup-replays 3 --kind probe --compare \
  --out "$OUT/probe.json" --deadline-s 200 > "$OUT/probe.log" 2>&1
echo "bench exit $?" >> "$OUT/probe.log"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_bytes.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
for spec in "GLM 5.3|1024|pearl grouped_mm $PP1 $PP2 $CO $P64" \
            "Kimi K3|1024|pearl grouped_mm $PP1 $CO" \
            "DeepSeek V4 Pro|4096|pearl-s3 pearl-s5 pearl-s6 $PP1" \
            "Kimi K3|4096|pearl-s3 pearl-s5 pearl-s6"; do
  IFS='|' read -r model tok impls <<< "$spec"
  timeout 120 $NCU --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" $impls >> "$OUT/ncu.csv" 2>> "$OUT/ncu.err"
  echo "ncu $model $tok exit $?" >> "$OUT/ncu.err"
done
kill $SMI
tail -n 3 "$OUT/pytest_probe.log"; tail -n 40 "$OUT/probe.log"; tail -n 8 "$OUT/ncu.err"
grep -c . "$OUT/ncu.csv"

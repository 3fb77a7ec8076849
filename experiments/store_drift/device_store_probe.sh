#!/usr/bin/env bash
# Why stage 4 (direct stores) and stage 7 (ping-pong) lose to their predecessors at 1024 tokens
# bash experiments/store_drift/device_store_probe.sh
# The ladder measures stage 4 1.31x stage 3 at Kimi K3 / 1024 tokens (0.99-1.09x at the other
# shapes from 256 tokens up) and stage 7 1.05-1.16x stage 6 at 1024 tokens (0.81-0.94x at 4096).
# This run takes both pairs at the three 1024-token shapes and Kimi K3 / 4096 through
# experiments/tools/power_probe.py (cold and sustained time, SM clock, power)
# and Nsight Compute (DRAM bytes read and written, L2 requests and sectors, global stores):
# experiments/store_drift/data/store_power.json and ncu_store.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
IMPLS="pearl-s3,pearl-s4,pearl-s6,pearl-s7"
timeout 300 python3 experiments/tools/power_probe.py "$OUT/store_power.json" --impls "$IMPLS" \
  --problems "Kimi K3:1024,GLM 5.3:1024,DeepSeek V4 Pro:1024,Kimi K3:4096" \
  --seconds 1.5 > "$OUT/power.log" 2>&1
echo "power exit $?" >> "$OUT/power.log"
grep -v "compile:" "$OUT/power.log" | tail -n 20
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_requests.sum,lts__t_sectors.sum,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed_op_global_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
for spec in "Kimi K3:1024" "GLM 5.3:1024" "DeepSeek V4 Pro:1024" "Kimi K3:4096"; do
  model=${spec%:*}; tok=${spec#*:}
  timeout 90 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" pearl-s3 pearl-s4 pearl-s6 pearl-s7 \
    > "$OUT/ncu_${model// /_}_$tok.csv" 2>> "$OUT/ncu.err"
  echo "ncu $spec exit $?" >> "$OUT/ncu.err"
done
# one file, experiments/store_drift/data/ncu_store.json (the layout of scripts/ncu_export.py)
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_store.json" ncu_store \
  "experiments/store_drift/device_store_probe.sh: Nsight Compute, one profiled launch per kernel after two unprofiled ones, clocks left alone, caches flushed before each launch (ncu's default)" \
  pearl-s3,pearl-s4,pearl-s6,pearl-s7
rm -f "$OUT"/ncu_*_[0-9]*.csv
grep exit "$OUT/ncu.err"; ls -la "$OUT"

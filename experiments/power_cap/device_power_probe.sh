#!/usr/bin/env bash
# Power probe: bash experiments/power_cap/device_power_probe.sh
# experiments/tools/power_probe.py on the stage kernels and tile shapes at decode and prefill: cold and
# sustained time per call, SM clock and board power (experiments/power_cap/data/power_probe.json).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
P64="pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true"
PP2="pearl-s7:tile_m=128+tile_n=128+shift_a_box=true"
CO="pearl-s3:tile_m=128+tile_n=256+ring_depth=4"
N3="pearl-s3:tile_m=64+tile_n=64"; N4="pearl-s3:tile_m=64+tile_n=256"; N2="pearl-s3:tile_m=128+tile_n=192"
IMPLS="pearl-s3,pearl-s5,pearl-s6,pearl-s6:walk=serial,pearl-s7,pearl-s7:walk=serial,$P64,$PP2,$CO,$N3,$N4,$N2"
timeout 450 python3 experiments/tools/power_probe.py "$OUT/power_probe.json" --impls "$IMPLS" \
  --problems "GLM 5.3:64,GLM 5.3:1024,GLM 5.3:4096,DeepSeek V4 Pro:4096,Kimi K3:4096" \
  --seconds 1.5 > "$OUT/power.log" 2>&1
echo "power exit $?" >> "$OUT/power.log"
grep -v "compile:" "$OUT/power.log" | tail -n 65
# Nsight Compute (clocks left alone) on GLM 5.3 at 4096 tokens: shared-memory bank traffic, L2
# requests, instructions, both walks of stage 6 (experiments/prefill_profile/data/ncu_glm4096.csv).
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,l1tex__data_bank_reads.sum,l1tex__data_bank_writes.sum,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum,lts__t_requests.sum,lts__t_sectors.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed
timeout 150 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
  python3 scripts/ncu_kernels.py "GLM 5.3" 4096 pearl-s3 pearl-s5 pearl-s6 pearl-s6:walk=serial \
  "$P64" "$PP2" "$CO" "$N3" "$N4" > "$OUT/ncu_glm4096.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?" >> "$OUT/ncu.err"
tail -n 2 "$OUT/ncu.err"

#!/usr/bin/env bash
# Shared-memory bandwidth probe: bash experiments/prefill_profile/device_smem_probe.sh
#  1. Nsight Compute (clocks left alone) on the prefill kernels whose model error differs most:
#     shared-memory bank reads / writes, tensor-pipe activity, L2 requests and sectors;
#  2. tile shapes never measured before (64x64, 128x64, 128x192, 64x256 with one consumer,
#     64x192 ping-pong) beside the calibrated ones, timed in interleaved rounds at 1024 and 4096
#     tokens, the SM clock and power logged every 200 ms (results/H200/tile_shapes.json.gz; the run
#     of 2026-11-30 17:36 UTC also asked for 256x128, which the sm_90a kernels do not implement).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/clocks.csv" 2>&1 &
SMI=$!
$NCU --query-metrics > "$OUT/ncu_metrics.txt" 2>&1
WANT="gpu__time_duration.sum sm__cycles_elapsed.avg.per_second
l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed
l1tex__data_bank_reads.sum l1tex__data_bank_writes.sum l1tex__throughput.avg.pct_of_peak_sustained_elapsed
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed sm__inst_executed_pipe_tensor_op_gmma.sum
lts__t_requests.sum lts__t_sectors.sum lts__t_sectors_op_read.sum lts__t_sector_hit_rate.pct
lts__throughput.avg.pct_of_peak_sustained_elapsed lts__d_sectors.sum dram__bytes_read.sum
sm__throughput.avg.pct_of_peak_sustained_elapsed l1tex__m_xbar2l1tex_read_bytes.sum"
M=""
for m in $WANT; do
  base=${m%%.*}
  if grep -q "^$base\b\|[[:space:]]$base[[:space:]]" "$OUT/ncu_metrics.txt"; then M="$M,$m"; else echo "no metric $base" >> "$OUT/ncu.err"; fi
done
M=${M#,}
S3=pearl-s3; S5=pearl-s5; S6=pearl-s6
P64="pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true"
PP2="pearl-s7:tile_m=128+tile_n=128+shift_a_box=true"
CO="pearl-s3:tile_m=128+tile_n=256+ring_depth=4"
N1="pearl-s3:tile_m=128+tile_n=64"; N2="pearl-s3:tile_m=128+tile_n=192"; N3="pearl-s3:tile_m=64+tile_n=64"
N4="pearl-s3:tile_m=64+tile_n=256"; N5="pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1"
IMPLS="$S3,$S5,$S6,$P64,$PP2,$CO,$N1,$N2,$N3,$N4,$N5"
timeout 330 python3 experiments/tools/variant_probe.py --out "$OUT/smem_probe.json" --kind probe \
  --impls "$IMPLS" --models all --tokens 1024,4096 --rounds 5 --deadline-s 200 --jobs 14 \
  > "$OUT/probe.log" 2>&1
echo "probe exit $?" >> "$OUT/probe.log"
for spec in "GLM 5.3|4096|$S3 $S5 $S6 $P64 $PP2 $CO $N1 $N2 $N3 $N4 $N5" \
            "Kimi K3|1024|$S3 $S6 $P64 $PP2 $CO"; do
  IFS='|' read -r model tok impls <<< "$spec"
  timeout 150 $NCU --profile-from-start off --clock-control none --csv --metrics "$M" \
    python3 scripts/ncu_kernels.py "$model" "$tok" $impls >> "$OUT/ncu.csv" 2>> "$OUT/ncu.err"
  echo "ncu $model $tok exit $?" >> "$OUT/ncu.err"
done
kill $SMI
tail -n 45 "$OUT/probe.log"; tail -n 8 "$OUT/ncu.err"
grep -c . "$OUT/ncu.csv"

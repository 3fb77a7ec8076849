#!/usr/bin/env bash
# Decides the prefill_order study on the GPU: HBM bytes and time of the two tile orders at the
# same tile, beside quack, on the two gate+up layers where the L2 model disagrees (Qwen2-57B-A14B:
# the grouped order reads half at a small effective L2; Qwen3-235B-A22B: it reads more), and the
# interleaved timing of the same implementations.
#
#   bash .device/run.sh bash experiments/prefill_order/device_order_ab.sh   # -> $OUT/...
#
# About 2 minutes on the H200 (2026-12-02): two Nsight Compute passes (clocks left alone) and one
# bench run; its data and finding are in experiments/prefill_order/data and experiments/README.md.
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
P128="pearl-s7:tile_m=128+b_k_tiles=1"
P192="pearl-s7:tile_m=128+tile_n=192+b_k_tiles=1+cluster_m=2"
IMPLS=("$P128" "$P128+n_group=8" "$P192" "$P192+n_group=8" quack)
for model in Qwen2-57B-A14B Qwen3-235B-A22B; do
  timeout 150 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv \
    --metrics "$M" python3 scripts/ncu_kernels.py "$model:gate_up:8" 4096 "${IMPLS[@]}" \
    > "$OUT/ncu_${model}_4096.csv" 2> "$OUT/ncu_${model}.err"
  echo "$model: ncu exit $?" | tee -a "$OUT/order_ab.txt"
done
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_order_ab.json" prefill_order \
  "ncu --clock-control none, one launch each" "$(IFS=,; echo "${IMPLS[*]}")" --rows \
  | tee -a "$OUT/order_ab.txt"
timeout 240 python3 -m pearl_moe bench --models Qwen2-57B-A14B,Qwen3-235B-A22B --tokens 4096 \
  --impls "$(IFS=,; echo "${IMPLS[*]}")" --kind order_ab --out "$OUT/order_ab.json" \
  2>&1 | tail -20 | tee -a "$OUT/order_ab.txt"

#!/usr/bin/env bash
# Decided whether a ping-pong warpgroup's 192-row tile (three m64 wgmma blocks, 192 x 128, 192
# accumulator registers a thread as 128 x 192) joins the kernel and the tuner's candidates. At
# 129-192 rows per expert one such tile holds an expert's rows where a 128-row tile needs two
# (Kimi K3's gate+up at 1024 tokens: 146 rows per expert, where quack-tuned's 192 x 128 ping-pong
# tile paired along N was 1.104x ahead of the default call on the H200). It ran as a patch on
# commit 1941e2b (data/pingpong_192_ab.json.gz, an H100), which then went into the package; now it
# runs the tile's GPU tests, then times the course's 1024-token layers with the default call,
# quack-tuned and the 192-row tile alone and paired along N in the same interleaved rounds.
#
#   bash .device/run.sh bash experiments/pingpong_192_rows/device_ab.sh   # -> $OUT/...
#   python experiments/tools/paired_ratios.py $OUT/pingpong_192_ab.json pearl   # each against the default call
#   python experiments/tools/paired_ratios.py $OUT/pingpong_192_ab.json quack-tuned
#
# AB_SET / AB_TOKENS choose other layers.
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
t192="pearl-s7:tile_m=192+tile_n=128+b_k_tiles=1"
timeout 240 python3 -m pytest -m gpu -q -x -k "192x128 or 192_row or 192-row" tests/test_kernels_sm90_gpu.py \
  2>&1 | tail -3 | tee "$OUT/gpu_tests.txt"
if grep -q " passed" "$OUT/gpu_tests.txt" && ! grep -q "failed\|error" "$OUT/gpu_tests.txt"; then
  timeout 330 python3 -m pearl_moe bench --set "${AB_SET:-course}" --tokens "${AB_TOKENS:-1024}" \
    --impls "pearl,quack-tuned,$t192,$t192+cluster_n=2" --rounds 6 --kind pingpong_192_ab \
    --deadline-s 280 --out "$OUT/pingpong_192_ab.json" 2>&1 | tail -6
fi

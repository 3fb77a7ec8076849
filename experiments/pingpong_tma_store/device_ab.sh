#!/usr/bin/env bash
# Decides whether the ping-pong epilogue through shared memory + TMA (pingpong_tma_store.patch)
# goes into the package and the tuner's candidates. Written for the package at commit aaf3d12
# (check it out first: the patch applies there, tests/test_trial_patches.py checks it). On this
# machine's copy of the tree: apply the
# patch, run the sm_90a ping-pong GPU tests (the new variants and ring cases among them), then
# time the held-out set's 4096-token layers (every one left above the tie after the uniform
# warpgroup index is a down projection on a ping-pong tile) with the default call, quack's
# default and the 128 x 192 ping-pong tile in clusters of two along M with either epilogue, in
# the same interleaved rounds; then take the patch out again.
#
#   bash .device/run.sh bash experiments/pingpong_tma_store/device_ab.sh   # -> $OUT/...
#   python experiments/tools/paired_ratios.py $OUT/pingpong_tma_ab.json quack
#   python experiments/tools/paired_ratios.py $OUT/pingpong_tma_ab.json \
#     pearl-s7:tile_m=128+tile_n=192+b_k_tiles=1+cluster_m=2     # the TMA store against the direct
#
# Ran once on an H100 (data/pingpong_tma_ab.json.gz, 154 s in all): the tests passed, and the TMA
# store took 1.015x the direct store's time, so the patch stayed out of the package. AB_SET /
# AB_TOKENS choose other layers.
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
here=experiments/pingpong_tma_store
pp="pearl-s7:tile_m=128+tile_n=192+b_k_tiles=1+cluster_m=2"
git apply "$here/pingpong_tma_store.patch" || patch -p1 < "$here/pingpong_tma_store.patch" || exit 3
# the new ping-pong TMA-store tests (many tiles a CTA, both warpgroups' buffer sets, clusters,
# buffer rotation; the variants' edge cases) and the existing ping-pong ring cases (about 30
# compiles; the direct-store ping-pong tests ran on the package already)
timeout 300 python3 -m pytest -m gpu -q -x -k "pingpong_tma or pingpong-tma or tma-store or ring_positions" \
  tests/test_kernels_sm90_gpu.py 2>&1 | tail -3 | tee "$OUT/gpu_tests.txt"
if grep -q " passed" "$OUT/gpu_tests.txt" && ! grep -q "failed\|error" "$OUT/gpu_tests.txt"; then
  timeout 300 python3 -m pearl_moe bench --set "${AB_SET:-held-out}" --tokens "${AB_TOKENS:-4096}" \
    --impls "pearl,quack,$pp,$pp+epilogue=tma_store" --rounds 6 --kind pingpong_tma_ab \
    --deadline-s 250 --out "$OUT/pingpong_tma_ab.json" 2>&1 | tail -4
fi
git apply -R "$here/pingpong_tma_store.patch" 2>/dev/null || patch -R -p1 < "$here/pingpong_tma_store.patch"

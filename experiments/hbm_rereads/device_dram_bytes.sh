#!/usr/bin/env bash
# HBM bytes each kernel really reads: bash experiments/hbm_rereads/device_dram_bytes.sh
# Nsight Compute, one pass per kernel (clocks left alone): DRAM bytes read, L2 sectors the TMA
# path asks for, kernel time; 13 stage kernels and tile shapes x 3 models x 3 token counts
# (experiments/hbm_rereads/data/ncu_dram_bytes.json). Compiles every kernel in parallel first.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
P64="pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true"
PP2="pearl-s7:tile_m=128+tile_n=128+shift_a_box=true"
CO="pearl-s3:tile_m=128+tile_n=256+ring_depth=4"
IMPLS=(pearl-s3 pearl-s5 pearl-s6 pearl-s6:walk=serial pearl-s7 "$P64" "$PP2" "$CO"
       pearl-s3:tile_m=64+tile_n=64 pearl-s3:tile_m=64+tile_n=256 pearl-s3:tile_m=128+tile_n=64
       pearl-s3:tile_m=128+tile_n=192 pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1)
LIST=$(IFS=,; echo "${IMPLS[*]}")
python3 - "$LIST" <<'PY' > "$OUT/compile.log" 2>&1
import sys
sys.path.insert(0, "experiments/tools")
import torch
from tqdm import tqdm
from variant_probe import compile_requests
from pearl_moe.bench import tune
from pearl_moe.kernels.api import arch_of
from pearl_moe.workloads import make_problem
problems = [make_problem(m, 1024, 8, "balanced", "gate_up") for m in ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3")]
dev = torch.device("cuda")
req = compile_requests(sys.argv[1].split(","), problems, arch_of(dev), torch.cuda.get_device_properties(dev).multi_processor_count)
print(tune.precompile_with_progress(req, 14, tqdm))
PY
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second
for model in "GLM 5.3" "DeepSeek V4 Pro" "Kimi K3"; do
  for tok in 256 1024 4096; do
    echo "== $model $tok" >> "$OUT/ncu.err"
    timeout 100 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
      python3 scripts/ncu_kernels.py "$model" "$tok" "${IMPLS[@]}" > "$OUT/ncu_${model// /_}_$tok.csv" 2>> "$OUT/ncu.err"
    echo "exit $?" >> "$OUT/ncu.err"
  done
done
# one file, experiments/hbm_rereads/data/ncu_dram_bytes.json: per "model|tokens", one row of metric values
# per implementation (the committed file holds two such runs on two machines, "1" and "2")
python3 scripts/ncu_export.py "$OUT" "$OUT/ncu_dram_bytes.json" ncu_dram_bytes \
  "experiments/hbm_rereads/device_dram_bytes.sh" \
  "$LIST"
rm -f "$OUT"/ncu_*_[0-9]*.csv
tail -n 2 "$OUT/compile.log"; grep -c exit "$OUT/ncu.err"; grep "exit [^0]" "$OUT/ncu.err"; ls "$OUT"

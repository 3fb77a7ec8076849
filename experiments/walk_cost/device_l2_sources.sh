#!/usr/bin/env bash
# Where L2 requests come from (GLM 5.3, 4096 tokens): bash experiments/walk_cost/device_l2_sources.sh
# Nsight Compute (clocks left alone) per source unit of the L2: the SMs' TEX/TMA path, the other
# L2 partition (ltcfabric), the constant/instruction cache (gcc); for both walks of stage 6 and
# three tile shapes (experiments/walk_cost/data/ncu_l2_sources.csv).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_requests.sum,lts__t_requests_srcunit_tex.sum,lts__t_requests_srcunit_ltcfabric.sum,lts__t_requests_srcunit_gcc.sum,lts__t_requests_srcunit_l1.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,gcc__cache_requests_type_instruction.sum,gcc__cache_requests_type_instruction_lookup_miss.sum,dram__bytes_read.sum,lts__t_requests_op_write.sum
P64="pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true"
timeout 200 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv --metrics "$M" \
  python3 scripts/ncu_kernels.py "GLM 5.3" 4096 pearl-s6 pearl-s6:walk=serial pearl-s7 pearl-s7:walk=serial \
  pearl-s3 pearl-s5 "$P64" > "$OUT/ncu_l2_sources.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?" >> "$OUT/ncu.err"
tail -n 3 "$OUT/ncu.err"
python3 - "$OUT/ncu_l2_sources.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; i, m, v = h.index("ID"), h.index("Metric Name"), h.index("Metric Value")
out = {}
for r in rows[1:]:
    if r[0] != "ID":
        out.setdefault(r[i], {})[r[m]] = r[v]
names = ["s6", "s6ser", "s7", "s7ser", "s3", "s5", "P64"]
for metric in next(iter(out.values())):
    print(f"{metric[:52]:<52}" + "".join(f"{out[k].get(metric, '')[:14]:>15}" for k in out))
print(" " * 52 + "".join(f"{n:>15}" for n in names))
PY

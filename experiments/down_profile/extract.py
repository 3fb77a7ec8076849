"""Reduce the Nsight Compute exports of ``device_down_profile.sh`` and of its SASS pass to
``data/down_profile_ncu.json`` (the raw CSVs, 0.1-0.6 MB each, stay off the repository).

    python experiments/down_profile/extract.py SECTIONS_DIR SASS_DIR

``SECTIONS_DIR`` holds ``ncu_<model>_4096.csv`` (``--csv`` of the sections pass, launch IDs in
the order of the script's implementations); ``SASS_DIR`` holds ``sass_0.csv.gz`` (ours) and
``sass_1.csv.gz`` (quack): ``ncu -i REPORT --csv --page source --print-source sass`` of one
launch each, with the SourceCounters section collected.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "down_profile_ncu.json"
IMPLS = ["pearl", "pearl 128x192 ping-pong clusterM2", "the same, n_group=8", "quack"]
METRICS = {  # the sections' names -> ours
    "Duration": "duration_ns",
    "SM Frequency": "sm_hz",
    "SM Active Cycles": "sm_active_cycles",
    "Issue Slots Busy": "issue_slots_busy_pct",
    "Executed Ipc Active": "ipc_active",
    "L1/TEX Hit Rate": "l1_hit_pct",
    "L2 Hit Rate": "l2_hit_pct",
    "DRAM Throughput": "dram_pct",
    "Compute (SM) Throughput": "sm_throughput_pct",
    "Dynamic Shared Memory Per Block": "dynamic_smem_bytes",
}


def sections(path: Path) -> list[dict]:
    rows = list(csv.reader(line for line in open(path) if line.startswith('"')))
    head = rows[0]
    iid, name, value = head.index("ID"), head.index("Metric Name"), head.index("Metric Value")
    out: dict[int, dict] = {}
    for r in rows[1:]:
        if r[name] in METRICS:
            out.setdefault(int(r[iid]), {})[METRICS[r[name]]] = float(r[value].replace(",", ""))
    return [out[i] for i in sorted(out)]


def sass_profile(path: Path) -> dict:
    """Executed instructions by opcode and the warp-stall samples of the mainloop's full-barrier
    wait, over one launch."""
    rows = list(csv.reader(gzip.open(path, "rt")))
    head = rows[1]
    src, done, stall = (head.index(h) for h in ("Source", "Instructions Executed",
                                                "Warp Stall Sampling (All Samples)"))  # fmt: skip
    executed, stalls = Counter(), Counter()
    for r in rows[2:]:
        if len(r) <= done or not r[src].strip():
            continue
        words = r[src].split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        executed[op] += int(r[done] or 0)
        stalls[op] += int(r[stall] or 0)
    total = sum(executed.values())
    return {
        "kernel": rows[0][1][:80],
        "instructions": total,
        "hgmma": executed["HGMMA"],
        "top_opcodes": dict(executed.most_common(12)),
        "stall_samples": sum(stalls.values()),
        "stall_samples_by_opcode": dict(stalls.most_common(8)),
    }


def main(argv: list[str]) -> int:
    sections_dir, sass_dir = (Path(a) for a in argv)
    doc = {
        "sections": {
            "gpu": "NVIDIA H100 80GB HBM3",
            "method": "ncu --clock-control none, one launch each, 4096 tokens per GPU, EP8",
            "impls": IMPLS,
            "runs": {
                f.name[4:-9]: sections(f) for f in sorted(sections_dir.glob("ncu_*_4096.csv"))
            },
        },
        "sass": {
            "gpu": "NVIDIA H200",
            "method": "ncu --clock-control none, SourceCounters, one launch each: MiniMax-M2 down, "
            "4096 tokens per GPU, EP8; ours is the default pick of the table then "
            "(128 x 128 ping-pong, direct store), quack its default configuration "
            "(128 x 192 ping-pong, clusters of two along M, TMA store)",
            "pearl": sass_profile(sass_dir / "sass_0.csv.gz"),
            "quack": sass_profile(sass_dir / "sass_1.csv.gz"),
        },
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Summarize Nsight Compute source counters (``ncu --page source --csv --print-source sass``).

    python experiments/walk_cost/source_counters.py OUT.json serial=source2.csv warp-parallel=source1.csv

Per kernel: executed warp instructions and warp-state samples in total, by stall reason, and for
the instruction groups that matter when comparing two walks of the tile scheduler: the walk
itself (offset loads, shuffles and votes, with the three instructions after each, where their
latency is charged), the mbarrier waits (try-wait, sleep, re-check and the branch that loops), the
wgmma and TMA instructions. Runs without a GPU (it reads the exported CSV).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _opcode(source: str) -> str:
    words = [w for w in source.split() if not w.startswith("@")]
    return words[0] if words else ""


def summarize(path: str | Path) -> dict:
    rows = list(csv.reader(Path(path).open()))
    header = rows[1]
    data = [dict(zip(header, r, strict=True)) for r in rows[2:] if len(r) == len(header)]
    samples = [_num(d["Warp Stall Sampling (All Samples)"]) for d in data]
    executed = [_num(d["Instructions Executed"]) for d in data]
    ops = [_opcode(d["Source"]) for d in data]
    walk, wait = set(), set()
    for i, op in enumerate(ops):
        if op.startswith(("LDG.E", "SHFL.UP", "SHFL.IDX", "VOTE")):
            walk.update(range(i, min(i + 4, len(ops))))
        if "TRYWAIT" in op:  # the wait and its slow path: sleep, re-check, branch back
            wait.add(i)
            for j in range(i + 1, min(i + 4, len(ops))):
                if data[j]["Source"].lstrip().startswith("@") or ops[j].startswith("NANOSLEEP"):
                    wait.add(j)
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    by_reason = {h[6:]: sum(_num(d[h]) for d in data) for h in stalls}
    sleeps = sum(
        _num(d["Predicated-On Thread Instructions Executed"]) / 32
        for d, op in zip(data, ops, strict=True)
        if op.startswith("NANOSLEEP")
    )

    def group(pred) -> dict:
        idx = [i for i, op in enumerate(ops) if pred(i, op)]
        return {
            "executed": sum(executed[i] for i in idx),
            "samples": sum(samples[i] for i in idx),
        }

    return {
        "instructions_executed": sum(executed),
        "samples": sum(samples),
        "samples_by_stall_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        "walk_code": group(lambda i, op: i in walk),
        "mbarrier_waits": group(lambda i, op: i in wait),
        "nanosleeps_taken": sleeps,
        "wgmma": group(lambda i, op: op.startswith("HGMMA")),
        "tma_loads": group(lambda i, op: op.startswith("UTMALDG")),
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out, *pairs = argv
    result = {name: summarize(path) for name, path in (p.split("=", 1) for p in pairs)}
    Path(out).write_text(json.dumps(result, indent=1))
    for name, s in result.items():
        print(
            f"{name:>14}: {s['instructions_executed'] / 1e6:7.1f} M instructions, "
            f"{s['samples'] / 1e3:6.1f} k samples; walk code {s['walk_code']['samples']:.0f}, "
            f"mbarrier waits {s['mbarrier_waits']['samples']:.0f}, wgmma "
            f"{s['wgmma']['samples']:.0f}; sleeps taken {s['nanosleeps_taken']:.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

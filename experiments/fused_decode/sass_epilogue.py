"""What the fused SwiGLU adds to the sm_90a kernel's instructions at decode's tile (CPU).

    python experiments/fused_decode/sass_epilogue.py [OUT.json]  # data/sass_epilogue_rcp.json

Compiles the gate+up GEMM that the H200 table picks for Kimi K3 at 1 token (EP8: 16 routed rows
over 112 experts, n = 6144, k = 3584), a 16 x 96 tile at stage 6, plain and with
``activation="swiglu"``, and counts each kernel's SASS instructions by opcode: what the epilogue
adds, and whether any of it is a slow path (``FCHK`` guards IEEE division and branches to a
``CALL``ed subroutine for operands the fast sequence cannot take).

``data/sass_epilogue.json`` is the build with SiLU's IEEE division (commit ``21705c4``); since,
the division is a hardware reciprocal, and the script writes ``data/sass_epilogue_rcp.json``.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

SHAPE = {"n": 6144, "k": 3584, "experts": 112, "rows": 16}  # Kimi K3 gate+up, 1 token, EP8


def opcode_counts(sass: str) -> collections.Counter:
    """Instructions of an nvdisasm listing by opcode (without modifiers or predicates)."""
    counts = collections.Counter()
    for line in sass.splitlines():
        if not re.match(r"\s*/\*[0-9a-f]{4}\*/", line):
            continue
        text = line.split("*/", 1)[-1].strip()
        match = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", text)
        if match:
            counts[match.group(2)] += 1
    return counts


def main(argv: list[str]) -> int:
    from pearl_moe.course.kernel_report import compile_many
    from pearl_moe.kernels import autotune

    n, k, experts, rows = SHAPE["n"], SHAPE["k"], SHAPE["experts"], SHAPE["rows"]
    stage, plain = autotune.pick_config("sm_90a", n, k, experts, rows, "H200")
    fused_stage, fused = autotune.pick_config("sm_90a", n, k, experts, rows, "H200", fused=True)
    fused = fused.with_(activation="swiglu")
    assert (fused_stage, fused.with_(activation=None)) == (stage, plain), "not the same tile"
    reports = compile_many([(stage, c, rows, n, k, experts) for c in (plain, fused)],
                           use_cache=False)  # fmt: skip
    kernels = {}
    for name, report in zip(("plain", "fused"), reports, strict=True):
        counts = opcode_counts(Path(report.files["sass"]).read_text())
        kernels[name] = {"label": report.label, "smem_bytes": report.smem_bytes,
                         "instructions": sum(counts.values()), "opcodes": dict(sorted(counts.items()))}  # fmt: skip
    out = Path(argv[0]) if argv else Path(__file__).parent / "data" / "sass_epilogue_rcp.json"
    out.write_text(json.dumps({"shape": SHAPE, "stage": stage, **kernels}, indent=1) + "\n")
    p, f = kernels["plain"]["opcodes"], kernels["fused"]["opcodes"]
    for op in sorted(set(p) | set(f)):
        if p.get(op, 0) != f.get(op, 0):
            print(f"{op:8s} {p.get(op, 0):5d} {f.get(op, 0):5d}")
    print(f"instructions: {kernels['plain']['instructions']} plain, "
          f"{kernels['fused']['instructions']} fused; wrote {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

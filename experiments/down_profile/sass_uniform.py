"""Static SASS of the sm_90a persistent kernel at five prefill configurations (CPU, no GPU):
instructions, R2UR moves, and the R2UR inside the mainloop (between its first and last HGMMA).

    python experiments/down_profile/sass_uniform.py LABEL   # adds LABEL's counts to the data

Run once with ``uniform_consumer.patch`` reverted (``patch -R -p1 <
experiments/down_profile/uniform_consumer.patch``; ``before``, then ``patch -p1 <`` it again) and
once on the package as it is (``after``: the patch is in it); ``data/sass_uniform.json`` keeps
both.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pearl_moe.config import GemmConfig
from pearl_moe.course.kernel_report import compile_many

OUT = Path(__file__).resolve().parent / "data" / "sass_uniform.json"
SHAPE = (32768, 3072, 1536, 32)  # MiniMax-M2 down at 4096 tokens per GPU, EP8
LABELS = [
    "sm_90a 128x192x64 1cta r5 clusterM2 direct pingpong",
    "sm_90a 128x128x64 1cta r7 direct pingpong",
    "sm_90a 256x192x64 1cta r3 tma",
    "sm_90a 128x256x64 1cta r4 tma",
    "sm_90a 64x128x64 1cta r8 tma",
]


def counts(sass: str) -> dict:
    lines = [x for x in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", x)]
    hgmma = [i for i, x in enumerate(lines) if "HGMMA" in x]
    loop = lines[hgmma[0] : hgmma[-1] + 1]
    return {
        "instructions": len(lines),
        "r2ur": sum("R2UR" in x for x in lines),
        "hgmma": len(hgmma),
        "mainloop_lines": len(loop),
        "mainloop_r2ur": sum("R2UR" in x for x in loop),
    }


def main(argv: list[str]) -> int:
    label = argv[0]
    reports = compile_many([(7, GemmConfig.from_label(c), *SHAPE) for c in LABELS], use_cache=False)
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"shape": SHAPE, "runs": {}}
    doc["runs"][label] = {
        c: counts(Path(r.files["sass"]).read_text()) for c, r in zip(LABELS, reports, strict=True)
    }
    for c, v in doc["runs"][label].items():
        print(f"{label:8s} {c:52s} {v}")
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Static SASS of the 128 x 192 ping-pong tile in clusters of two along M (quack's default Hopper
configuration) with its two epilogues (CPU, no GPU): the direct store from registers, and the
store through shared memory + TMA that ``pingpong_tma_store.patch`` adds (a set of epilogue
buffers and a named barrier per consumer warpgroup).

    git apply experiments/pingpong_tma_store/pingpong_tma_store.patch
    python experiments/pingpong_tma_store/sass_epilogue.py        # -> data/sass_epilogue.json
    git apply -R experiments/pingpong_tma_store/pingpong_tma_store.patch
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from pearl_moe.course.kernel_report import compile_many, count_opcodes
from pearl_moe.kernels.ladder import stage_config

OUT = Path(__file__).resolve().parent / "data" / "sass_epilogue.json"
SHAPE = (32768, 3072, 1536, 32)  # MiniMax-M2 down at 4096 tokens per GPU, EP8
PINGPONG = dict(tile_m=128, tile_n=192, b_k_tiles=1, cluster_m=2, ring_depth=None)
EPILOGUES = {"direct": {}, "tma": {"epilogue": "tma_store"}}
OPCODES = ("SEL", "SHFL", "STG", "STSM", "UTMASTG", "HGMMA", "R2UR")


def opcode_counts(sass: str) -> collections.Counter:
    """Instructions by base opcode (``STG.E.128`` counts as ``STG``), from the package's parser."""
    ops = collections.Counter()
    for opcode, n in count_opcodes(sass).items():
        ops[opcode.split(".")[0]] += n
    return ops


def main() -> int:
    configs = {
        name: stage_config("sm_90a", 7).with_(**PINGPONG, **extra).resolved()
        for name, extra in EPILOGUES.items()
    }
    reports = compile_many([(7, c, *SHAPE) for c in configs.values()], use_cache=False)
    doc = {"shape": SHAPE, "runs": {}}
    for (name, config), report in zip(configs.items(), reports, strict=True):
        ops = opcode_counts(Path(report.files["sass"]).read_text())
        doc["runs"][name] = {
            "config": config.describe(),
            "smem_bytes": report.smem_bytes,
            "instructions": sum(ops.values()),
            **{op: ops.get(op, 0) for op in OPCODES},
        }
        print(name, doc["runs"][name])
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

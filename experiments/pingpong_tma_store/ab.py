"""The ping-pong tile's two epilogues against each other and against quack's default, per layer.

    python experiments/pingpong_tma_store/ab.py RUN.json

``RUN.json`` comes from ``device_ab.sh``: the 128 x 192 ping-pong tile in clusters of two along M
with the direct store (``pearl-s7:...``) and through shared memory + TMA (``...+epilogue=
tma_store``), quack's default and the default call, timed in the same interleaved rounds. Each
ratio is paired round by round (``bench.compare.paired_ratio``).
"""

from __future__ import annotations

import sys

from pearl_moe.bench.compare import geomean, paired_ratio
from pearl_moe.replay import read_run

PINGPONG = "pearl-s7:tile_m=128+tile_n=192+b_k_tiles=1+cluster_m=2"
TMA = PINGPONG + "+epilogue=tma_store"


def ratios(path: str) -> dict[str, dict[str, float]]:
    """``{layer: {"tma/direct", "tma/quack", "direct/quack", "default/quack"}}``."""
    by: dict[str, dict] = {}
    for r in read_run(path)["records"]:
        if r["status"] == "ok":
            by.setdefault(r["problem"], {})[r["impl"]] = r
    out = {}
    for layer, t in by.items():
        if {PINGPONG, TMA, "quack", "pearl"} <= set(t):
            out[layer] = {
                "tma/direct": paired_ratio(t[TMA], t[PINGPONG])["ratio"],
                "tma/quack": paired_ratio(t[TMA], t["quack"])["ratio"],
                "direct/quack": paired_ratio(t[PINGPONG], t["quack"])["ratio"],
                "default/quack": paired_ratio(t["pearl"], t["quack"])["ratio"],
            }
    return out


def main(argv: list[str]) -> int:
    rows = ratios(argv[0])
    for layer, r in sorted(rows.items()):
        print(f"{layer:45s} " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()))
    if rows:
        keys = next(iter(rows.values()))
        print(f"{len(rows)} layers, geomean: "
              + ", ".join(f"{k} {geomean([r[k] for r in rows.values()]):.3f}" for k in keys))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

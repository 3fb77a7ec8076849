"""Ours / quack per layer in the run before the patch and in the one after, and the change.

    python experiments/down_profile/uniform_ab.py BEFORE.json AFTER.json

Both runs come from ``device_uniform_ab.sh`` (the held-out set's 4096-token layers, ours against
quack's default, interleaved rounds). Each ratio is paired round by round within its run
(``bench.compare.paired_ratio``); the patch's effect is the second ratio over the first.
"""

from __future__ import annotations

import sys

from pearl_moe.bench.compare import geomean, paired_ratio
from pearl_moe.replay import read_run


def ratios(path: str) -> dict:
    run = read_run(path)
    by = {}
    for r in run["records"]:
        if r["status"] == "ok":
            by.setdefault(r["problem"], {})[r["impl"]] = r
    return {
        p: paired_ratio(t["pearl"], t["quack"])["ratio"]
        for p, t in by.items()
        if {"pearl", "quack"} <= set(t)
    }


def main(argv: list[str]) -> int:
    before, after = ratios(argv[0]), ratios(argv[1])
    common = sorted(set(before) & set(after))
    for p in common:
        print(f"{p:45s} {before[p]:.3f} -> {after[p]:.3f}  ({after[p] / before[p]:.3f}x)")
    change = geomean([after[p] / before[p] for p in common])
    print(f"{len(common)} layers: ours/quack geomean {geomean([before[p] for p in common]):.3f} "
          f"-> {geomean([after[p] for p in common]):.3f}; the patch's change {change:.3f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

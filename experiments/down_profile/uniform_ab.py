"""Ours / quack per layer in the run before the patch and in the one after, and the change.

    python experiments/down_profile/uniform_ab.py BEFORE.json AFTER.json

Both runs come from ``device_uniform_ab.sh`` (the held-out set's 4096-token layers, ours against
quack's default, interleaved rounds). Each ratio is paired round by round within its run
(``bench.compare.paired_ratio``); the patch's effect is the second ratio over the first.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pearl_moe.bench.compare import geomean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from paired_ratios import ratios as paired_ratios  # noqa: E402 (experiments/tools is no package)


def ratios(path: str) -> dict:
    """``{layer: ours / quack}`` of one run (``tools/paired_ratios.py``)."""
    return paired_ratios(path, "quack")["pearl"]


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

"""Every implementation of a bench run against one reference, layer by layer (CPU).

    python experiments/tools/paired_ratios.py RUN.json [REFERENCE]    # REFERENCE default quack

For each problem, each implementation's time over the reference's, paired round by round inside
the run (``bench.compare.paired_ratio``), then the geomean over the problems where both ran. For
the A/B runs of the studies (several variants of ours, the default call and a baseline timed in
the same interleaved rounds): a variant's gain is its ratio against the default call's.
"""

from __future__ import annotations

import sys

from pearl_moe.bench.compare import geomean, paired_ratio
from pearl_moe.results import read_run


def ratios(path: str, reference: str = "quack") -> dict[str, dict[str, float]]:
    """``{implementation: {problem: time / reference's time}}`` over the run's correct records."""
    by: dict[str, dict] = {}
    for r in read_run(path)["records"]:
        if r["status"] == "ok" and r.get("correctness", {}).get("ok", True):
            by.setdefault(r["problem"], {})[r["impl"]] = r
    out: dict[str, dict[str, float]] = {}
    for problem, impls in by.items():
        if reference not in impls:
            continue
        for impl, record in impls.items():
            if impl != reference:
                ratio = paired_ratio(record, impls[reference])["ratio"]
                out.setdefault(impl, {})[problem] = ratio
    return out


def main(argv: list[str]) -> int:
    reference = argv[1] if len(argv) > 1 else "quack"
    table = ratios(argv[0], reference)
    for impl, rows in table.items():
        print(f"{impl} / {reference}: geomean {geomean(list(rows.values())):.3f} over {len(rows)}")
        for problem, ratio in sorted(rows.items()):
            print(f"  {problem:45s} {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

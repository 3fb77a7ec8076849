"""How strongly should the vote charge a tile width for the SM waves it fills? (CPU, no GPU)

The vote (``pearl_moe.kernels.autotune.vote``) carries each neighbour's relative times over to the
shape asked, scaled by ``(wave_cost here / wave_cost there) ** WAVE_EXPONENT``. This script judges
the exponent as the package judges the vote: leave every model of the committed H200 table out in
turn, let the other models vote for its entries, and look the winner up among the times the
hidden entry measured (``table_studies.leave_one_model_out``). It writes
``experiments/wave_charge/data/lomo_exponents.json``:

    python experiments/wave_charge/lomo_exponents.py

Only the tuning table's own measurements enter; the held-out set of ``pearl_moe.bench.shape_sets`` is
never read.
"""

from __future__ import annotations

import json
from pathlib import Path

from pearl_moe.bench import table_studies
from pearl_moe.bench.compare import geomean
from pearl_moe.kernels import autotune

EXPONENTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
OUT = Path(__file__).resolve().parent / "data" / "lomo_exponents.json"


def judge(table: dict, exponent: float, twins: bool = False) -> dict:
    """Leave-one-model-out at ``exponent``; ``twins``: with the vote's wave twins
    (``autotune.WAVE_TWINS``, added after this study chose the exponent: ``experiments/wave_twin``
    judges both together), off by default to give the vote this study judged."""
    kept = autotune.WAVE_EXPONENT, autotune.WAVE_TWINS
    autotune.WAVE_EXPONENT, autotune.WAVE_TWINS = exponent, twins
    try:
        rows = table_studies.leave_one_model_out(table)
    finally:
        autotune.WAVE_EXPONENT, autotune.WAVE_TWINS = kept
    timed = [r for r in rows if r["regret"]]
    small = [r for r in timed if r["rows_per_expert"] < 1]
    return {
        "exponent": exponent,
        "entries": len(rows),
        "voted_a_timed_candidate": len(timed),
        "geomean_regret": round(geomean(r["regret"] for r in timed), 4),
        "worst_regret": round(max(r["regret"] for r in timed), 4),
        "below_one_row_per_expert": len(small),
        "geomean_regret_below_one_row": round(geomean(r["regret"] for r in small), 4),
    }


def main() -> None:
    table = json.loads((autotune.TABLE_DIR / "H200.json").read_text())
    rows = [judge(table, e) for e in EXPONENTS]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"table": "pearl_moe/tuning/H200.json",
                               "table_entries": len(table["entries"]), "rows": rows}, indent=1))  # fmt: skip
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()

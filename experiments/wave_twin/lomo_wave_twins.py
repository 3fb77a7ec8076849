"""Should the vote carry a neighbour's wave-fitted tile over as this shape's own? (CPU, no GPU)

At decode the tuner times each shape's own wave-fitted width (``autotune.wave_width``: the tile
width whose tiles fill the SMs' waves best for that shape's active experts), so a width fitted to
one shape is a candidate at a neighbour only where the same width happens to fit there too. With
``autotune.WAVE_TWINS`` the vote also scores a neighbour's wave-fitted candidates at this shape's
wave-fitted width (the wave and m-tile terms carry the time over). This script judges the vote with
and without it as the package judges the vote, leave-one-model-out on each committed table
(``table_studies.leave_one_model_out``), at the wave exponents ``experiments/wave_charge`` compared:

    python experiments/wave_twin/lomo_wave_twins.py     # -> data/lomo_wave_twins.json

Only the tuning tables' own measurements enter; the held-out set is never read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pearl_moe.bench import table_studies
from pearl_moe.bench.compare import geomean
from pearl_moe.kernels import autotune

OUT = Path(__file__).resolve().parent / "data" / "lomo_wave_twins.json"
EXPONENTS = (0.0, 0.25, 0.5)
#: The vote judged: without twins, with twins up to one row per expert (the package's
#: ``WAVE_TWIN_ROWS``), and with twins up to 64 rows per expert (the decode candidate space).
VARIANTS = {"off": (False, 1.0), "up_to_1_row": (True, 1.0), "up_to_64_rows": (True, 64.0)}
BANDS = {"all": (0.0, math.inf), "up_to_one_row": (0.0, 1.0), "one_to_64_rows": (1.0, 64.0)}


def judge(table: dict, variant: str, exponent: float) -> tuple[dict, list[dict]]:
    """The regrets by band (and the rows of ``table_studies.leave_one_model_out``)."""
    kept = autotune.WAVE_TWINS, autotune.WAVE_TWIN_ROWS, autotune.WAVE_EXPONENT
    twins, rows_limit = VARIANTS[variant]
    autotune.WAVE_TWINS, autotune.WAVE_TWIN_ROWS, autotune.WAVE_EXPONENT = (
        twins,
        rows_limit,
        exponent,
    )
    try:
        rows = table_studies.leave_one_model_out(table)
    finally:
        autotune.WAVE_TWINS, autotune.WAVE_TWIN_ROWS, autotune.WAVE_EXPONENT = kept
    out = {"variant": variant, "exponent": exponent, "entries": len(rows)}
    for band, (lo, hi) in BANDS.items():
        timed = [r["regret"] for r in rows if r["regret"] and lo < r["rows_per_expert"] <= hi]
        out[band] = {"timed": len(timed), "geomean_regret": round(geomean(timed), 4),
                     "worst_regret": round(max(timed), 4)}  # fmt: skip
    return out, rows


def main() -> None:
    doc = {"tables": {}}
    for gpu in ("H200", "H100"):
        table = json.loads((autotune.TABLE_DIR / f"{gpu}.json").read_text())
        judged = {(v, e): judge(table, v, e) for v in VARIANTS for e in EXPONENTS}
        runs = [out for out, _ in judged.values()]
        off = judged["off", autotune.WAVE_EXPONENT][1]
        changed = {}
        for variant in ("up_to_1_row", "up_to_64_rows"):
            on = judged[variant, autotune.WAVE_EXPONENT][1]
            changed[variant] = [
                {"measured_at": b["measured_at"], "without": b["voted"], "with": a["voted"],
                 "regret_without": b["regret"], "regret_with": a["regret"]}
                for b, a in zip(off, on, strict=True) if b["voted"] != a["voted"]
            ]  # fmt: skip
        doc["tables"][gpu] = {"entries": len(table["entries"]), "runs": runs, "changed": changed}
        for r in runs:
            print(gpu, r["variant"], r["exponent"], {b: r[b] for b in BANDS})
    OUT.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()

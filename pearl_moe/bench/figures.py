"""The benchmark figures' old address: they are registered and saved by :mod:`pearl_moe.figures`
and drawn by :mod:`pearl_moe.plots`. Notebooks 00 and 09 import these names from here."""

from ..figures import (
    BENCH_FIGURES,
    COMPARE_IMPLS,
    STEP_LABELS,
    ablation_cells,
    ablation_figure,
    compare_figure,
    compare_rows,
    latency_vs_tokens,
    pct_of_floor,
    stages_latency,
)

__all__ = [
    "BENCH_FIGURES",
    "latency_vs_tokens",
    "pct_of_floor",
    "stages_latency",
    "ablation_cells",
    "ablation_figure",
    "compare_rows",
    "compare_figure",
    "STEP_LABELS",
    "COMPARE_IMPLS",
]

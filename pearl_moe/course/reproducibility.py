"""How far one kernel's measured time moves between runs (notebook 09, section 13).

``results/H200/replicates/`` holds two small studies, each a set of bench runs at 1024 and 4096
tokens, every run in a fresh process (new inputs, new CUDA graphs):

* ``scripts/device_replicates.sh``, one device call: design A (stages 3, 5 and 6, their dynamic
  twins and a 128 x 256 control) three times in a row (``replicate_1..3``);
* ``scripts/device_designs.sh``, a later device call: design A and design B (the ladder, stages
  1-7) alternated A B A B (``design_A1``, ``design_B1``, ``design_A2``, ``design_B2``).

``results/H200/ladder.json.gz`` (``scripts/device_ladder.sh``, the call between them) is design B
at every shape, and ``replicates/ladder_2.json.gz`` the same script again in a fourth call. :func:`spreads` compares any runs kernel by kernel; across all committed runs the
calibration does the same (:func:`pearl_moe.calibrate.replicates`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..bench.records import read_run
from .results import results_path

__all__ = ["STUDY", "load_study", "run_medians", "spreads", "step_ratios"]

#: The committed runs of the study: label -> file under ``results/H200/``. The label says which
#: device call (1: replicates, 2: ladder, 3: designs, 4: ladder again) and which design.
STUDY = {
    "call 1, A, process 1": "replicates/replicate_1.json.gz",
    "call 1, A, process 2": "replicates/replicate_2.json.gz",
    "call 1, A, process 3": "replicates/replicate_3.json.gz",
    "call 2, B (ladder)": "ladder.json.gz",
    "call 3, A, process 1": "replicates/design_A1.json.gz",
    "call 3, B, process 2": "replicates/design_B1.json.gz",
    "call 3, A, process 3": "replicates/design_A2.json.gz",
    "call 3, B, process 4": "replicates/design_B2.json.gz",
    "call 4, B (ladder)": "replicates/ladder_2.json.gz",
}


def load_study(gpu: str = "H200", root: Path | None = None) -> dict[str, dict] | None:
    """``{label: run}`` for :data:`STUDY`; None when any of its files is not committed."""
    paths = {label: results_path(name, gpu, root) for label, name in STUDY.items()}
    if not all(p.exists() for p in paths.values()):
        return None
    return {label: read_run(p) for label, p in paths.items()}


def run_medians(run: Mapping, tokens=None) -> dict[tuple[str, str], float]:
    """``{(problem id, impl): median us}`` of a run's correct records (``tokens``: only those)."""
    out = {}
    for r in run["records"]:
        if r["status"] != "ok":
            continue
        if tokens is not None and int(r["problem"].split("|")[2]) not in tokens:
            continue
        out[(r["problem"], r["impl"])] = r["time"]["median_us"]
    return out


def spreads(runs: Mapping[str, Mapping], tokens=(1024, 4096)) -> list[dict]:
    """One row per kernel and problem timed in at least two of ``runs`` (``{label: run}``):
    ``problem``, ``impl``, ``times`` (``{label: median us}``), ``spread`` (slowest / fastest - 1)
    and ``shift`` (the mean of its other times / its time in the first of ``runs`` that has it).
    Largest spread first."""
    medians = {label: run_medians(run, tokens) for label, run in runs.items()}
    keys = dict.fromkeys(k for m in medians.values() for k in m)
    rows = []
    for key in keys:
        times = {label: m[key] for label, m in medians.items() if key in m}
        if len(times) < 2:
            continue
        values = list(times.values())
        rows.append(
            dict(
                problem=key[0],
                impl=key[1],
                times=times,
                spread=max(values) / min(values) - 1,
                shift=sum(values[1:]) / len(values[1:]) / values[0],
            )
        )
    return sorted(rows, key=lambda r: -r["spread"])


def step_ratios(run: Mapping, tokens=None) -> dict[tuple[str, int], float]:
    """``{(problem id, stage): time of pearl-s<stage> / time of pearl-s<stage - 1>}`` within one run
    (the ladder's steps, as a ratio of medians), for every stage whose predecessor ran too."""
    medians = run_medians(run, tokens)
    out = {}
    for (problem, impl), t in medians.items():
        if impl.startswith("pearl-s") and impl[7:].isdigit():
            stage = int(impl[7:])
            before = medians.get((problem, f"pearl-s{stage - 1}"))
            if before:
                out[(problem, stage)] = t / before
    return out

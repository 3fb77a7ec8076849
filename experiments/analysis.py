"""Readers the studies share: where their data lies, and the few computations their tests check.

Each study keeps its data in ``experiments/<study>/data/`` (:func:`data`); the files the package's
own tests still read stay in ``results/H200/`` (:data:`RESULTS`). Nothing here is part of
``pearl_moe``: the studies' tests (``experiments/tests/``) import it from this folder.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping
from pathlib import Path

from pearl_moe.course.profiles import REQUESTS, ncu_export
from pearl_moe.results import read_run

__all__ = [
    "EXPERIMENTS",
    "RESULTS",
    "REQUESTS",
    "STUDY",
    "data",
    "hbm_reads",
    "load_study",
    "ncu_export",
    "ncu_metrics",
    "run_medians",
    "schedule_ratios",
    "spreads",
    "step_ratios",
]

EXPERIMENTS = Path(__file__).resolve().parent
RESULTS = EXPERIMENTS.parent / "results" / "H200"


def data(study: str, name: str) -> Path:
    """``experiments/<study>/data/<name>``."""
    return EXPERIMENTS / study / "data" / name


# ------------------------------------------------------------------------ Nsight Compute exports
def ab_ratios(study: str, name: str, reference: str, gpu: str = "NVIDIA H100 80GB HBM3") -> dict:
    """``{implementation: {layer: time / reference's}}`` of a study's A/B run
    (``tools/paired_ratios.py``), after checking that it ran on ``gpu`` and every record is
    correct."""
    sys.path.insert(0, str(EXPERIMENTS / "tools"))
    from paired_ratios import ratios

    path = data(study, name)
    run = read_run(path)
    assert run["env"]["gpu"] == gpu
    assert all(r["status"] == "ok" and r["correctness"]["ok"] for r in run["records"])
    return ratios(str(path), reference)


def ncu_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """``{launch ID: {metric name: value}}`` of a trimmed ``ncu --csv`` export (columns ``ID``,
    ``Metric Name``, ``Metric Unit``, ``Metric Value``; ``ID`` is the profiled launch, in the order
    the script listed its implementations)."""
    out: dict[int, dict[str, float]] = {}
    with Path(path).open() as fh:
        for row in csv.DictReader(fh):
            value = float(row["Metric Value"].replace(",", ""))
            out.setdefault(int(row["ID"]), {})[row["Metric Name"]] = value
    return out


def hbm_reads(path: Path) -> dict | None:
    """``{"method", "rows"}`` from an export with ``dram__bytes_read.sum``, one row per (run,
    problem, implementation): ``run``, ``model``, ``tokens``, ``impl``, ``config`` (its label),
    ``dram_bytes`` (read from HBM), ``seconds`` (one launch), ``counted_bytes`` (the HBM bytes of
    :func:`pearl_moe.model.perfmodel.predict`, which reads each byte once) and ``ratio``. The model counts
    the same bytes for every tile schedule, so a ``schedule=`` variant (a study's kernel, no longer
    in the package) is counted as its static twin. None when the file is not committed."""
    from pearl_moe.bench.baselines import parse_variant, variant_config
    from pearl_moe.hardware import get_gpu
    from pearl_moe.model.perfmodel import predict
    from pearl_moe.workloads import make_problem

    dram = ncu_export(Path(path))
    if dram is None:
        return None
    spec = get_gpu("H200")
    configs = {}
    rows = []
    for run, problems in dram["runs"].items():
        for key, per_impl in problems.items():
            model, tokens = key.split("|")
            problem = make_problem(model, int(tokens), ep=8)
            for impl, values in per_impl.items():
                if impl not in configs:
                    stage, overrides = parse_variant(impl)
                    overrides.pop("schedule", None)
                    configs[impl] = (stage, variant_config(spec.arch, stage, overrides))
                stage, config = configs[impl]
                counted = predict(problem, config, spec, stage=stage).hbm_bytes
                read = values["dram__bytes_read.sum"]
                rows.append(
                    {
                        "run": run,
                        "model": model,
                        "tokens": int(tokens),
                        "impl": impl,
                        "config": config.describe(),
                        "dram_bytes": read,
                        "seconds": values["gpu__time_duration.sum"] * 1e-9,
                        "counted_bytes": counted,
                        "ratio": read / counted,
                    }
                )
    return {"method": dram["method"], "rows": rows}


# ------------------------------------------------------------------------------- bench runs
def schedule_ratios(run: Mapping, schedule: str) -> dict[tuple[str, str, int], float]:
    """``{(kernel, model, tokens): time with schedule / time without}`` of a bench run that timed
    kernels both ways (``pearl-s5`` and ``pearl-s5:schedule=lockstep``, say): medians over the
    run's interleaved rounds, correct records only, in the run's problem order."""
    med = {
        (r["problem"], r["impl"]): r["time"]["median_us"]
        for r in run["records"]
        if r["status"] == "ok"
    }
    problems = {
        p["id"]: (i, p["model"], p["tokens_per_gpu"]) for i, p in enumerate(run["problems"])
    }
    out = {}
    for (pid, impl), t in sorted(med.items(), key=lambda kv: problems[kv[0][0]][0]):
        if f"schedule={schedule}" not in impl:
            continue
        base = impl.replace(f":schedule={schedule}", "").replace(f"+schedule={schedule}", "")
        if (pid, base) in med:
            out[(base, *problems[pid][1:])] = t / med[(pid, base)]
    return out


#: The runs of the reproducibility study, label -> file. The label says in which of four runs on
#: the GPU machine, minutes apart, each process ran (1: three processes of design A; 2: the ladder;
#: 3: designs A and B alternated; 4: the ladder again) and which design.
STUDY = {
    "call 1, A, process 1": data("reproducibility", "replicate_1.json.gz"),
    "call 1, A, process 2": data("reproducibility", "replicate_2.json.gz"),
    "call 1, A, process 3": data("reproducibility", "replicate_3.json.gz"),
    "call 2, B (ladder)": RESULTS / "ladder.json.gz",
    "call 3, A, process 1": data("reproducibility", "design_A1.json.gz"),
    "call 3, B, process 2": data("reproducibility", "design_B1.json.gz"),
    "call 3, A, process 3": data("reproducibility", "design_A2.json.gz"),
    "call 3, B, process 4": data("reproducibility", "design_B2.json.gz"),
    "call 4, B (ladder)": data("reproducibility", "ladder_2.json.gz"),
}


def load_study() -> dict[str, dict] | None:
    """``{label: run}`` for :data:`STUDY`; None when any of its files is not committed."""
    if not all(p.exists() for p in STUDY.values()):
        return None
    return {label: read_run(p) for label, p in STUDY.items()}


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

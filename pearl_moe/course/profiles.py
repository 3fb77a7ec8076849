"""Read the Nsight Compute exports committed under ``results/<gpu>/power/`` for the notebooks.

:func:`ncu_metrics` reads a trimmed ``ncu --csv`` export (columns ``ID``, ``Metric Name``,
``Metric Unit``, ``Metric Value``; ``ID`` is the profiled launch, in the order the script lists its
implementations). :func:`hbm_reads` reads ``ncu_dram_bytes.json`` (``scripts/device_dram_bytes.sh``)
and sets every kernel's HBM bytes against the latency model's count, which reads each byte once.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .results import results_path

__all__ = ["ncu_metrics", "hbm_reads"]


def ncu_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """``{launch ID: {metric name: value}}`` of a trimmed Nsight Compute CSV export."""
    out: dict[int, dict[str, float]] = {}
    with Path(path).open() as fh:
        for row in csv.DictReader(fh):
            value = float(row["Metric Value"].replace(",", ""))
            out.setdefault(int(row["ID"]), {})[row["Metric Name"]] = value
    return out


def hbm_reads(
    gpu: str = "H200", root: Path | None = None, name: str = "power/ncu_dram_bytes.json"
) -> dict | None:
    """``{"method": how it was measured, "rows": [...]}`` from ``name`` (``ncu_dram_bytes.json``,
    or any export of that layout, such as ``schedule/ncu_schedule.json``), one
    row per (run, problem, implementation): ``run``,
    ``model``, ``tokens``, ``impl``, ``config`` (its label), ``dram_bytes`` (read from HBM),
    ``seconds`` (one launch), ``counted_bytes`` (:func:`pearl_moe.perfmodel.predict`'s HBM bytes)
    and ``ratio``. None when the file is not committed."""
    from ..bench.baselines import parse_variant, variant_config
    from ..hardware import get_gpu
    from ..perfmodel import predict
    from ..workloads import make_problem

    path = results_path(name, gpu, root)
    if not path.exists():
        return None
    dram = json.loads(path.read_text())
    col = {m: i for i, m in enumerate(dram["metrics"])}
    spec = get_gpu(gpu)
    configs = {}
    for impl in dram["impls"]:
        stage, overrides = parse_variant(impl)
        configs[impl] = (stage, variant_config(spec.arch, stage, overrides))
    rows = []
    for run, problems in dram["runs"].items():
        for key, values_per_impl in problems.items():
            model, tokens = key.split("|")
            problem = make_problem(model, int(tokens), ep=8)
            for impl, values in zip(dram["impls"], values_per_impl, strict=True):
                stage, config = configs[impl]
                counted = predict(problem, config, spec, stage=stage).hbm_bytes
                read = values[col["dram__bytes_read.sum"]]
                rows.append(
                    {
                        "run": run,
                        "model": model,
                        "tokens": int(tokens),
                        "impl": impl,
                        "config": config.describe(),
                        "dram_bytes": read,
                        "seconds": values[col["gpu__time_duration.sum"]] * 1e-9,
                        "counted_bytes": counted,
                        "ratio": read / counted,
                    }
                )
    return {"method": dram["method"], "rows": rows}

"""Read the Nsight Compute exports committed under ``results/<gpu>/`` for the notebooks.

:func:`ncu_metrics` reads a trimmed ``ncu --csv`` export (columns ``ID``, ``Metric Name``,
``Metric Unit``, ``Metric Value``; ``ID`` is the profiled launch, in the order the script lists its
implementations). :func:`ncu_export` reads the JSON exports of ``scripts/ncu_export.py``
(``power/ncu_dram_bytes.json``, ``schedule/ncu_*.json``). :func:`hbm_reads` sets every kernel's HBM
bytes in one of them against the latency model's count, which reads each byte once.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .results import results_path

__all__ = ["ncu_metrics", "ncu_export", "hbm_reads", "REQUESTS"]

#: Nsight Compute's L2 requests from the SMs' loads (TMA included).
REQUESTS = "lts__t_requests_srcunit_tex_op_read.sum"


def ncu_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """``{launch ID: {metric name: value}}`` of a trimmed Nsight Compute CSV export."""
    out: dict[int, dict[str, float]] = {}
    with Path(path).open() as fh:
        for row in csv.DictReader(fh):
            value = float(row["Metric Value"].replace(",", ""))
            out.setdefault(int(row["ID"]), {})[row["Metric Name"]] = value
    return out


def ncu_export(name: str, gpu: str = "H200", root: Path | None = None) -> dict | None:
    """``{"method": ..., "runs": {run: {"<model>|<tokens>": {impl: {metric: value}}}}}`` from a
    JSON export of ``scripts/ncu_export.py`` (``power/ncu_dram_bytes.json``,
    ``schedule/ncu_pairs.json`` ...); None when the file is not committed."""
    path = results_path(name, gpu, root)
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    runs = {
        run: {
            key: {
                impl: dict(zip(doc["metrics"], values, strict=True))
                for impl, values in zip(doc["impls"], per_impl, strict=True)
            }
            for key, per_impl in problems.items()
        }
        for run, problems in doc["runs"].items()
    }
    return {"method": doc["method"], "runs": runs}


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

    dram = ncu_export(name, gpu, root)
    if dram is None:
        return None
    spec = get_gpu(gpu)
    configs = {}
    rows = []
    for run, problems in dram["runs"].items():
        for key, per_impl in problems.items():
            model, tokens = key.split("|")
            problem = make_problem(model, int(tokens), ep=8)
            for impl, values in per_impl.items():
                if impl not in configs:
                    stage, overrides = parse_variant(impl)
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

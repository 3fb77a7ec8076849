"""Read the Nsight Compute exports committed under ``results/<gpu>/`` for the notebooks.

An export is the JSON file ``scripts/ncu_export.py`` gathers from the per-problem ``ncu --csv``
output of ``scripts/ncu_kernels.py``: every implementation's metrics, per problem and per run.
Notebook 06 reads the L2 requests of stages 5 and 6 from one (``profiles/ncu_pairs.json``); the
studies of ``experiments/`` read theirs the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from .measurements import results_path

__all__ = ["ncu_export", "REQUESTS"]

#: Nsight Compute's L2 requests from the SMs' loads (TMA included).
REQUESTS = "lts__t_requests_srcunit_tex_op_read.sum"


def ncu_export(name: str | Path, gpu: str = "H200", root: Path | None = None) -> dict | None:
    """``{"method": ..., "runs": {run: {"<model>|<tokens>": {impl: {metric: value}}}}}`` from a
    JSON export of ``scripts/ncu_export.py``: ``name`` under ``results/<gpu>/``
    (``profiles/ncu_pairs.json`` ...), or a :class:`~pathlib.Path` to the file itself. None when
    the file is not committed."""
    path = name if isinstance(name, Path) else results_path(name, gpu, root)
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

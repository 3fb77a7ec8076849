"""Gather the per-problem Nsight Compute CSV exports of a device script into one JSON file.

    python3 scripts/ncu_export.py DIR OUT.json KIND METHOD IMPL1,IMPL2,... [--rows]

Reads ``DIR/ncu_<model>_<tokens>.csv`` (``ncu --csv`` of ``scripts/ncu_kernels.py``; model names
with ``_`` for spaces; launch ``ID`` in the order of the implementations) and writes
``{"kind", "method", "impls", "metrics", "runs": {"1": {"<model>|<tokens>": [[value per metric]
per implementation]}}}``, the layout :func:`pearl_moe.course.profiles.ncu_export` reads. Prints the
number of problems, and with ``--rows`` every implementation's values.
"""

from __future__ import annotations

import csv
import glob
import json
import re
import sys


def main(argv: list[str]) -> int:
    folder, out, kind, method, impls, *flags = argv
    impls = impls.split(",")
    metrics, run = [], {}
    for f in sorted(glob.glob(f"{folder}/ncu_*_*.csv")):
        match = re.match(r".*/ncu_(.*)_(\d+)\.csv", f)
        if not match:
            continue
        model, tokens = match.groups()
        rows = list(csv.reader(line for line in open(f) if line.startswith('"')))
        if not rows:
            continue
        head, values = rows[0], {}
        for r in rows[1:]:
            if r[0] != "ID":
                name = r[head.index("Metric Name")]
                if name not in metrics:
                    metrics.append(name)
                value = float(r[head.index("Metric Value")].replace(",", ""))
                values[(int(r[head.index("ID")]), name)] = value
        run[f"{model.replace('_', ' ')}|{tokens}"] = [
            [values.get((i, m)) for m in metrics] for i in range(len(impls))
        ]
    doc = {"kind": kind, "method": method, "impls": impls, "metrics": metrics, "runs": {"1": run}}
    with open(out, "w") as fh:
        fh.write(json.dumps(doc))
    print(len(run), "problems")
    if "--rows" in flags:
        for key, rows in run.items():
            for impl, v in zip(impls, rows, strict=True):
                print(key, impl, [f"{x:.4g}" if x is not None else None for x in v])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

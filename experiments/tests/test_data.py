"""Every bench run among the studies' data follows the schema of ``pearl_moe.results``;
every tuning table (``tuning_*``) the schema of ``pearl_moe.kernels.autotune``. Profiler traces
(``step_graph_trace_*``), per-CTA traces (``cta_trace_*``) and the layer A/B runs of a study's
own script (``layer_ab_*``) are gzipped JSON of their own script's making, not bench runs."""

import gzip
import json

from analysis import EXPERIMENTS

from pearl_moe.kernels.autotune import _validate_table
from pearl_moe.results import read_run


def test_study_runs_follow_the_schema():
    runs = sorted(
        f
        for f in EXPERIMENTS.glob("*/data/*.json.gz")
        if not f.name.startswith(("tuning_", "step_graph_trace_", "cta_trace_", "layer_ab_"))
    )
    assert len(runs) >= 15
    for f in runs:
        run = read_run(f)
        for r in run["records"]:
            if r["status"] == "ok" and run["kind"] == "moe_layer":  # a layer's relative error
                tolerance = float(r["correctness"]["message"].split("tolerance ")[1].rstrip(")"))
                assert r["correctness"]["rel_err"] <= tolerance, f
            elif r["status"] == "ok":
                assert r["correctness"]["max_abs_err"] <= r["correctness"]["tolerance"], f


def test_study_tuning_tables_follow_the_schema():
    tables = sorted(EXPERIMENTS.glob("*/data/tuning_*.json.gz"))
    assert tables
    for f in tables:
        table = _validate_table(json.loads(gzip.decompress(f.read_bytes())), str(f))
        assert table["entries"] and all("candidates" in e for e in table["entries"])

"""Every bench run among the studies' data follows the schema of ``pearl_moe.bench.records``."""

from analysis import EXPERIMENTS

from pearl_moe.bench.records import read_run


def test_study_runs_follow_the_schema():
    runs = sorted(EXPERIMENTS.glob("*/data/*.json.gz"))
    assert len(runs) >= 15
    for f in runs:
        for r in read_run(f)["records"]:
            if r["status"] == "ok":
                assert r["correctness"]["max_abs_err"] <= r["correctness"]["tolerance"], f

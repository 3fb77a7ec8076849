import copy
from pathlib import Path

import pytest

from pearl_moe.results import raise_read_ceiling, read_run


def _run(read_probe=4.0e12):
    problems = [
        {"id": "a", "bytes_moved": 4_000_000, "flops": 1_000_000, "floor_us": 1.0},
        {"id": "b", "bytes_moved": 9_000_000, "flops": 1_000_000, "floor_us": 2.25},
    ]

    def rec(problem, impl, min_us, median_us):
        return {
            "problem": problem,
            "impl": impl,
            "status": "ok",
            "time": {"min_us": min_us, "median_us": median_us},
            "metrics": {},
        }

    return {
        "ceilings": {"read_bytes_per_s": read_probe, "bf16_flops_per_s": 1e15},
        "problems": problems,
        "records": [
            rec("a", "slow", 2.0, 2.0),
            rec("b", "fast", 2.0, 2.5),  # 9 MB in 2 us = 4.5 TB/s > the probe's 4.0
            {"problem": "b", "impl": "broken", "status": "incorrect"},
        ],
    }


def test_the_ceiling_rises_to_a_demonstrated_rate_and_floors_follow():
    run = raise_read_ceiling(_run())
    c = run["ceilings"]
    assert c["read_probe_bytes_per_s"] == 4.0e12
    assert c["read_bytes_per_s"] == pytest.approx(4.5e12)
    assert "fast on b" in c["read_ceiling_source"]
    floors = {p["id"]: p["floor_us"] for p in run["problems"]}
    assert floors["b"] == pytest.approx(2.0) and floors["a"] == pytest.approx(4 / 4.5)
    pct = [r["metrics"]["pct_of_floor"] for r in run["records"] if r["status"] == "ok"]
    assert max(pct) <= 100.0 + 1e-9  # no implementation beats its floor any more


def test_a_probe_nobody_beats_is_kept_and_the_call_is_idempotent():
    run = raise_read_ceiling(_run(read_probe=5e12))
    assert run["ceilings"]["read_bytes_per_s"] == 5e12
    assert "no implementation" in run["ceilings"]["read_ceiling_source"]
    again = raise_read_ceiling(copy.deepcopy(run))
    assert again["ceilings"] == run["ceilings"]


def test_committed_h200_runs_never_exceed_their_floor():
    results = Path(__file__).resolve().parent.parent / "results" / "H200"
    for path in sorted(results.glob("*.json")):
        run = read_run(path)
        name = path.name
        for rec in run["records"]:
            if rec["status"] == "ok":
                assert rec["metrics"]["pct_of_floor"] <= 100.0 + 1e-6, (name, rec["impl"])


def test_live_ceiling_follows_a_faster_kernel():
    from pearl_moe.bench.harness import floor_seconds, with_demonstrated_read
    from pearl_moe.workloads import GroupedProblem

    p = GroupedProblem(k=64, n=64, counts=(4,))
    ceilings = {"read_bytes_per_s": 1e9, "bf16_flops_per_s": 1e15}
    fast = p.bytes_moved() / 2e9  # a kernel that read at 2 GB/s
    raised = with_demonstrated_read(ceilings, p, fast)
    assert raised["read_bytes_per_s"] == pytest.approx(2e9)
    assert raised["read_probe_bytes_per_s"] == 1e9 and ceilings["read_bytes_per_s"] == 1e9
    assert floor_seconds(p, raised) == pytest.approx(fast)
    assert with_demonstrated_read(ceilings, p, 10 * fast) is ceilings

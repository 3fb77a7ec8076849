"""What the warp-parallel walk costs stage 6: source counters, L2 sources, the polling build."""

import json

from analysis import RESULTS, data, ncu_metrics

from pearl_moe.bench.compare import paired_ratio
from pearl_moe.results import read_run


def _walk_ratio(run, model, tokens, num, den):
    pid = f"{model}|gate_up|{tokens}|EP8|balanced"
    by = {r["impl"]: r for r in run["records"] if r["problem"] == pid and r["status"] == "ok"}
    return paired_ratio(by[num], by[den])["ratio"]


def test_walk_evidence():
    walk_run = read_run(RESULTS / "walk.json.gz")  # the course's walk run (notebooks 07b, 08b)
    """The source counters, and the polling build's walk ratios."""
    counters = json.loads(data("walk_cost", "walk_source_counters.json").read_text())
    warp, serial = counters["warp-parallel"], counters["serial"]
    assert 1.12 <= warp["samples"] / serial["samples"] <= 1.14  # "13% more"
    for s in (warp, serial):
        assert s["walk_code"]["samples"] / s["samples"] < 0.01  # "under 1%"
    assert warp["mbarrier_waits"]["samples"] > serial["mbarrier_waits"]["samples"]
    assert (
        0.9e6 <= warp["nanosleeps_taken"] <= 0.95e6
        and 0.14e6 <= serial["nanosleeps_taken"] <= 0.16e6
    )
    spin = read_run(data("walk_cost", "walk_spin_acquire.json.gz"))
    expected = {"GLM 5.3": (1.07, 1.11), "DeepSeek V4 Pro": (1.14, 1.20), "Kimi K3": (1.03, 1.06)}
    for model, (polling, committed) in expected.items():
        args = (model, 4096, "pearl-s6", "pearl-s6:walk=serial")
        spin_ratio = _walk_ratio(spin, *args)
        walk_ratio = _walk_ratio(walk_run, *args)
        # the notebook prints ratios of medians; paired ratios agree to within 1%
        assert abs(spin_ratio - polling) < 0.015 and abs(walk_ratio - committed) < 0.015
        assert spin_ratio > 1.02  # the gap stays


def test_l2_sources():
    """With the warp-parallel walk, 16% more L2 sectors from TMA, 29% more misses."""
    by = ncu_metrics(data("walk_cost", "ncu_l2_sources.csv"))
    warp, serial = by[0], by[1]  # pearl-s6, pearl-s6:walk=serial (device_l2_sources.sh)
    sectors = "lts__t_sectors_srcunit_tex_op_read.sum"
    misses = "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"
    assert 1.155 <= warp[sectors] / serial[sectors] <= 1.165
    assert 1.285 <= warp[misses] / serial[misses] <= 1.295

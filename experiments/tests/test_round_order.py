"""The round-order study: the compare run with the arranged order, and the predecessor tests."""

import json
import statistics

from analysis import data

from pearl_moe.bench.compare import compare_summary
from pearl_moe.results import read_run


def test_arranged_order():
    """The compare run with the arranged order, and its neighbour effect."""
    run = read_run(data("round_order", "compare_arranged_order.json.gz"))
    s = compare_summary(run)
    assert round(s["geomean_ratio"], 3) == 0.985 and round(s["worst"]["ratio"], 3) == 1.019
    assert not s["above_tie"] and round(s["decode_vs_quack"]["geomean_speedup"], 2) == 1.13

    def after_quack(impl, pid):
        r = next(x for x in run["records"] if x["problem"] == pid and x["impl"] == impl)
        pairs = list(zip(r["time"]["after"], r["time"]["round_median_us"], strict=True))
        q = [us for a, us in pairs if a == "quack-tuned"]
        rest = [us for a, us in pairs if a and a != "quack-tuned"]
        return statistics.median(q) / statistics.median(rest), len(q)

    for model in ("DeepSeek V4 Pro", "Kimi K3"):
        for tokens in (64, 256):
            pid = f"{model}|gate_up|{tokens}|EP8|balanced"
            for impl in ("pearl", "triton"):
                assert 1.025 <= after_quack(impl, pid)[0] <= 1.06  # "3-6% slower"
    for tokens in (16, 64, 256):
        pid = f"GLM 5.3|gate_up|{tokens}|EP8|balanced"
        assert abs(after_quack("pearl", pid)[0] - 1) <= 0.016
        if tokens < 256:
            assert abs(after_quack("triton", pid)[0] - 1) <= 0.017
    assert 1.055 <= after_quack("triton", "GLM 5.3|gate_up|256|EP8|balanced")[0] <= 1.06
    assert after_quack("pearl", "Kimi K3|gate_up|64|EP8|balanced")[1] == 3
    assert after_quack("triton", "Kimi K3|gate_up|64|EP8|balanced")[1] == 2


def test_queued_predecessor():
    """The neighbour effect in isolation, queued and after a pause."""

    def cell(path):
        rows = json.loads(path.read_text())["rows"]
        return {(r["before"], r["gap_ms"]): r["median_us"] for r in rows}

    expected = {  # model: (queued, synchronized without a pause) slowdown after quack-tuned
        "deepseek_v4_pro": (1.025, 1.007),
        "kimi_k3": (1.021, 1.020),
    }
    for name, (queued, synced) in expected.items():
        t = cell(data("round_order", f"predecessor_gap_queued_{name}_64.json"))
        assert abs(t[("quack-tuned", -1.0)] / t[("pearl", -1.0)] - queued) < 0.0015
        assert abs(t[("quack-tuned", 0.0)] / t[("pearl", 0.0)] - synced) < 0.0015
        assert abs(t[("quack-tuned", 100.0)] / t[("pearl", 100.0)] - 1) <= 0.005
        for gap in (-1.0, 0.0, 100.0):
            assert abs(t[("triton", gap)] / t[("pearl", gap)] - 1) <= 0.006

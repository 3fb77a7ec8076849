"""The power cap study: every number experiments/README.md states about it."""

import json
import statistics

from analysis import data


def test_power_cap():
    """Every power-probe cell at the cap; the clock range; cold against steady."""
    path = data("power_cap", "power_probe.json")
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 60
    assert all(681 <= r["watts"] <= 705 and r["power_capped"] == 1.0 for r in rows)
    clocks = [r["sm_mhz"] for r in rows]
    assert 1160 <= min(clocks) and max(clocks) <= 1625 and 1370 <= statistics.mean(clocks) <= 1390

    def ratio(r):
        return r["steady_us"] / r["cold_us"]

    prefill = [r for r in rows if " 64 tok" not in r["problem"]]
    not_64x64 = [ratio(r) for r in prefill if "tile_n=64" not in r["impl"]]
    assert 1.05 <= min(not_64x64) and max(not_64x64) <= 1.225  # "5-22%"
    decode = [r for r in rows if " 64 tok" in r["problem"]]
    tile_m = {r["impl"]: r["config"]["gemm_config"]["tile_m"] for r in decode}
    assert all(abs(ratio(r) - 1) <= 0.02 for r in decode if tile_m[r["impl"]] == 64)
    wide = [ratio(r) for r in decode if tile_m[r["impl"]] == 128]
    assert 1.02 <= min(wide) and max(wide) <= 1.10  # "the 128-row tiles lose 2-10%"
    # the walk's gap is as large cold as steady: stage 6 at 4096 tokens, warp-parallel / serial
    cell = {
        (r["problem"].split(" gate_up")[0], r["impl"], " 4096 tok" in r["problem"]): r for r in rows
    }
    for model, cold, steady in (("GLM 5.3", 1.09, 1.10), ("DeepSeek V4 Pro", 1.24, 1.20)):
        warp, serial = cell[(model, "pearl-s6", True)], cell[(model, "pearl-s6:walk=serial", True)]
        assert abs(warp["cold_us"] / serial["cold_us"] - cold) < 0.005
        assert abs(warp["steady_us"] / serial["steady_us"] - steady) < 0.005

"""The store-drift study: stage 4 against stage 3, stage 7 against stage 6, under Nsight Compute."""

from analysis import data, ncu_export

from pearl_moe.model import calibrate


def test_stage_4_drifts_where_stage_3_does_not():
    """At Kimi K3 / 1024 tokens stage 4 reads 1.76x stage
    3's HBM bytes with 1.44x the L2 requests (hit rate 40% against 54%) and 1.27x the time of one
    launch, and the ladder run times it at 1.31x stage 3 (0.99-1.09x at every other shape from 256
    tokens up); at GLM 5.3 and DeepSeek V4 Pro / 1024 tokens the two read the same bytes within
    0.3%. Stage 7 reads stage 6's bytes within 0.2% with 1-3% fewer requests at 1024 tokens and
    takes 1.02-1.09x as long (the ladder: 1.05-1.16x)."""
    runs = ncu_export(data("store_drift", "ncu_store.json"))["runs"]["1"]
    dram, req, t = "dram__bytes_read.sum", "lts__t_requests.sum", "gpu__time_duration.sum"

    def ratio(key, a, b, metric):
        return runs[key][a][metric] / runs[key][b][metric]

    kimi = runs["Kimi K3|1024"]
    assert round(ratio("Kimi K3|1024", "pearl-s4", "pearl-s3", dram), 2) == 1.76
    assert round(ratio("Kimi K3|1024", "pearl-s4", "pearl-s3", req), 2) == 1.44
    assert round(ratio("Kimi K3|1024", "pearl-s4", "pearl-s3", t), 2) == 1.27
    hit = "lts__t_sector_hit_rate.pct"
    assert round(kimi["pearl-s4"][hit]) == 40 and round(kimi["pearl-s3"][hit]) == 54
    for key in ("GLM 5.3|1024", "DeepSeek V4 Pro|1024"):
        assert abs(ratio(key, "pearl-s4", "pearl-s3", dram) - 1) < 0.003
    # Kimi K3 / 4096 tokens: stage 6 2.26x stage 3's bytes, stage 4 1.18x, stage 7 0.87x
    for impl, want in (("pearl-s6", 2.26), ("pearl-s4", 1.18), ("pearl-s7", 0.87)):
        assert round(ratio("Kimi K3|4096", impl, "pearl-s3", dram), 2) == want
    for key in ("GLM 5.3|1024", "DeepSeek V4 Pro|1024", "Kimi K3|1024"):
        assert abs(ratio(key, "pearl-s7", "pearl-s6", dram) - 1) < 0.002
        assert 0.97 <= ratio(key, "pearl-s7", "pearl-s6", req) <= 0.99
        assert 1.015 <= ratio(key, "pearl-s7", "pearl-s6", t) <= 1.095

    every, _ = calibrate.load_records()
    ladder = {
        (r.impl, r.problem.name): r.measured_s
        for r in every
        if r.source == "ladder.json.gz" and r.problem.name.endswith("balanced")
    }
    s4 = {}
    s7 = {}
    for (impl, name), time in ladder.items():
        tokens = int(name.split("|")[2])
        if impl == "pearl-s4" and tokens >= 256:
            s4[name] = time / ladder[("pearl-s3", name)]
        if impl == "pearl-s7" and tokens == 1024:
            s7[name] = time / ladder[("pearl-s6", name)]
    kimi_name = "Kimi K3|gate_up|1024|EP8|balanced"
    assert round(s4.pop(kimi_name), 2) == 1.31
    # stage 4 = stage 3 with direct stores and the freed buffer as a seventh ring entry
    (c3,) = {r.config for r in every if r.source == "ladder.json.gz" and r.impl == "pearl-s3"}
    (c4,) = {r.config for r in every if r.source == "ladder.json.gz" and r.impl == "pearl-s4"}
    assert (c3.ring_depth, c4.ring_depth) == (6, 7)
    assert c4 == c3.with_(epilogue="direct_store", ring_depth=7)
    assert len(s4) == 8 and 0.985 <= min(s4.values()) and max(s4.values()) <= 1.095
    assert len(s7) == 3 and 1.045 <= min(s7.values()) and max(s7.values()) <= 1.165

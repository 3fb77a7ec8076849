"""The fused gated activation at decode: the same tile costs about the same; the width decides."""

import json

from analysis import data, ncu_metrics


def test_at_the_same_tile_the_fused_epilogue_costs_about_what_the_plain_one_does():
    """The layer's own gate+up calls under Nsight Compute (one launch each, twice, alternating
    plain and fused): GLM 5.3 at 1 token, the same 8 x 128 tile, 95.7-97.6 against 97.2-98.2 us,
    the same 403 MB read; DeepSeek V4 Pro at 1 token, 16 x 96 plain against 8 x 128 fused,
    125-127 against 145-146 us, the same 529 MB: the width, not the epilogue."""
    glm = ncu_metrics(data("fused_decode", "ncu_layer_glm53_1tok.csv"))
    plain = [glm[i]["gpu__time_duration.sum"] / 1e3 for i in (0, 2)]
    fused = [glm[i]["gpu__time_duration.sum"] / 1e3 for i in (1, 3)]
    assert [round(t, 1) for t in plain] == [97.6, 95.7]
    assert [round(t, 1) for t in fused] == [98.2, 97.2]
    assert all(round(m["dram__bytes_read.sum"] / 1e6) in (403,) for m in glm.values())
    v4 = ncu_metrics(data("fused_decode", "ncu_layer_v4pro_1tok.csv"))
    assert [round(v4[i]["gpu__time_duration.sum"] / 1e3) for i in range(4)] == [127, 146, 125, 145]
    assert all(round(m["dram__bytes_read.sum"] / 1e6) == 529 for m in v4.values())


def test_with_128_rows_the_fused_epilogue_costs_a_few_percent_at_the_same_tile():
    """Interleaved CUDA-graph rounds on GLM 5.3's 16-token gate+up inputs (every call, see the
    file's note): fused over plain at the same tile 1.004-1.051, 1.004 at 8 x 128."""
    times = json.loads(data("fused_decode", "fused_ab.json").read_text())
    assert "GLM 5.3's 16-token" in times.pop("note")
    times.pop("gpu")
    ratios = []
    for label, t in times.items():
        if "| fused " in label:
            plain = label.replace("| fused ", "| plain ").removesuffix(" swiglu")
            ratios.append(t / times[plain])
    assert len(ratios) == 9
    assert round(min(ratios), 3) == 1.004 and round(max(ratios), 3) == 1.051

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


def _layer_times() -> dict:
    """``{(problem, impl): median us}`` of the committed H200 layer run."""
    import gzip

    from analysis import RESULTS

    run = json.loads(gzip.decompress((RESULTS / "moe_layer.json.gz").read_bytes()))
    return {(r["problem"], r["impl"]): r["time"]["median_us"]
            for r in run["records"] if r.get("status") == "ok"}  # fmt: skip


def test_the_step_timings_and_the_layer_timings_disagree_at_one_token():
    """In the layer run (every 1-token pick fused at the plain pick's own tile: 8 x 128 on GLM
    5.3, 16 x 96 on DeepSeek V4 Pro and Kimi K3) the fused gate+up step takes 1.067-1.091x the
    plain step at 1 token, 1.003-1.006x at 64 tokens; the separate activation step costs 7.2-7.7
    us, less than the fused step's extra 8.2-14.9 us. Yet the whole fused layer is 0.944-0.980x
    the layer with the pass at 1 token: the steps do not add up to the layers."""
    t = _layer_times()
    models = ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3")

    def step(model, tokens, name):
        return t[(f"{model}|layer|{tokens}|EP8|balanced", f"step:{name}")]

    one = [step(m, 1, "gate+up (fused)") / step(m, 1, "gate+up") for m in models]
    assert round(min(one), 3) == 1.067 and round(max(one), 3) == 1.091
    sixty_four = [step(m, 64, "gate+up (fused)") / step(m, 64, "gate+up") for m in models]
    assert round(min(sixty_four), 3) == 1.003 and round(max(sixty_four), 3) == 1.006
    extra = [step(m, 1, "gate+up (fused)") - step(m, 1, "gate+up") for m in models]
    activation = [step(m, 1, "activation") for m in models]
    assert round(min(extra), 1) == 8.2 and round(max(extra), 1) == 14.9
    assert round(min(activation), 1) == 7.2 and round(max(activation), 1) == 7.7
    layer = [t[(f"{m}|layer|1|EP8|balanced", "pearl-fused")]
             / t[(f"{m}|layer|1|EP8|balanced", "pearl")] for m in models]  # fmt: skip
    assert round(min(layer), 3) == 0.944 and round(max(layer), 3) == 0.980


def test_the_fused_swiglu_compiles_to_ieee_division_with_its_slow_path():
    """Kimi K3's 1-token tile (16 x 96, stage 6): the fused kernel has 1808 SASS instructions
    against 1384 plain, the same shared memory; 24 FCHK guards and 24 CALLs of the division's
    slow path, 52 MUFU against 2 (exp2 and the reciprocal for each output)."""
    sass = json.loads(data("fused_decode", "sass_epilogue.json").read_text())
    plain, fused = sass["plain"], sass["fused"]
    assert (plain["instructions"], fused["instructions"]) == (1384, 1808)
    assert plain["smem_bytes"] == fused["smem_bytes"]
    assert "swiglu" in fused["label"] and "16x96" in plain["label"]
    assert fused["opcodes"]["FCHK"] == fused["opcodes"]["CALL"] == 24
    assert "FCHK" not in plain["opcodes"] and "CALL" not in plain["opcodes"]
    assert (plain["opcodes"]["MUFU"], fused["opcodes"]["MUFU"]) == (2, 52)

"""The stage notebooks' helpers (05-08): one ablation step, its latency bars, code excerpts, SASS of
the GEMM kernel, the stage figures, a live step timed with a fake harness; and the claims the
notebooks make about the committed H200 ablation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pearl_moe.course import (
    STAGE_IMPLS,
    SourceView,
    ablation_step,
    format_ablation_step,
    gemm_families,
    get_excerpt,
    gpu_check_lines,
    load_kernel_results,
    plot_ablation_step,
    plot_stage_budgets,
    plot_stage_occupancy,
    show_excerpt,
    side_by_side,
    step_latency_bars,
    step_verdict,
)
from pearl_moe.kernels.ladder import stage_config
from pearl_moe.workloads import make_problem

CEIL = {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}
ENV = {"gpu": "NVIDIA H200", "date": "2026-11-30T11:27:22+00:00"}
PERSISTENT = (
    "pearl_moe.kernels.sm100.stage3_persistent:PersistentGroupedGemmKernel.persistent_kernel"
)


def _ablation(root: Path, rounds: dict) -> dict:
    """An ablation run: ``rounds[(tokens, impl)]`` = round medians in us (None: failed its check)."""
    from pearl_moe.bench.harness import metrics
    from pearl_moe.bench.records import new_run, problem_entry, problem_from_entry, write_run

    run = new_run("ablation", dict(ENV), dict(CEIL))
    run["method"] = {"check": "poisoned output", "timing": "interleaved rounds"}
    entries = {}
    for (tokens, impl), medians in rounds.items():
        if tokens not in entries:
            entries[tokens] = problem_entry(make_problem("GLM 5.3", tokens), CEIL)
            run["problems"].append(entries[tokens])
        entry = entries[tokens]
        record = {"problem": entry["id"], "impl": impl, "config": {"config": f"cfg {impl}"}}
        if medians is None:
            record.update(status="incorrect", correctness={"ok": False, "message": "rows differ"})
        else:
            us = sorted(medians)[len(medians) // 2]
            record.update(
                status="ok",
                time={
                    "median_us": us,
                    "min_us": min(medians),
                    "max_us": max(medians),
                    "round_median_us": medians,
                    "range_pct": 1.0,
                },  # fmt: skip
                metrics=metrics(problem_from_entry(entry), us * 1e-6, CEIL),
                correctness={"ok": True, "max_abs_err": 0.01, "torch_bf16_max_abs_err": 0.01},
            )
        run["records"].append(record)
    return load_kernel_results(write_run(run, root / "H200" / "ablation.json"))


def test_stage_impls_name_every_kernel_stage():
    assert [STAGE_IMPLS[s] for s in range(1, 8)] == [f"pearl-s{s}" for s in range(1, 8)]


def test_ablation_step_pairs_rounds_and_says_when_a_step_is_resolved(tmp_path):
    data = _ablation(
        tmp_path,
        {
            (64, "pearl-s3"): [100.0, 101.0, 99.0, 100.0, 102.0],
            (64, "pearl-s4"): [90.0, 91.0, 89.0, 90.0, 92.0],  # faster in every round
            (4096, "pearl-s3"): [1000.0, 1000.0, 1000.0, 1000.0, 1000.0],
            (4096, "pearl-s4"): [990.0, 1010.0, 1000.0, 1005.0, 995.0],  # within noise
            (16, "pearl-s3"): [50.0, 50.0, 50.0, 50.0, 50.0],
            (16, "pearl-s4"): None,  # failed its check: not compared
        },
    )
    step = ablation_step(data, 4)
    assert (step["from"], step["to"], step["stage"]) == ("pearl-s3", "pearl-s4", 4)
    rows = {r["tokens"]: r for r in step["rows"]}
    assert rows[64]["ratio"] == pytest.approx(0.9, abs=2e-3) and rows[64]["verdict"] == "faster"
    assert rows[64]["lo"] < rows[64]["hi"] < 1 and rows[64]["rounds"] == 5
    assert rows[4096]["verdict"] == "within noise"
    assert "ratio" not in rows[16] and rows[16]["status"] == ("ok", "incorrect")
    g = step["geomean"]
    assert g["decode"]["shapes"] == 1 and g["decode"]["faster"] == 1
    assert g["prefill"]["shapes"] == 1 and g["all"]["shapes"] == 2
    assert step["timing"] == "interleaved rounds" and step["source"].startswith("replayed from")
    text = format_ablation_step(step)
    assert "stage 4 against stage 3" in text and "cfg pearl-s3  ->  stage 4: cfg pearl-s4" in text
    assert "incorrect" in text and "faster" in text and "within noise" in text
    assert "decode (<= 256 tokens):" in text and "source: replayed from" in text
    assert ablation_step(None, 4) is None
    assert format_ablation_step(None).startswith("no recorded measurement yet")


def test_step_verdict_needs_every_round():
    assert step_verdict({"ratio": 0.9, "lo": 0.8, "hi": 0.95, "rounds": 5}) == "faster"
    assert step_verdict({"ratio": 1.1, "lo": 1.01, "hi": 1.2, "rounds": 5}) == "slower"
    assert step_verdict({"ratio": 1.0, "lo": 0.9, "hi": 1.1, "rounds": 5}) == "within noise"
    assert step_verdict({"ratio": 0.9, "lo": 0.9, "hi": 0.9, "rounds": 1}).startswith("one round")
    assert step_verdict({}) == "not compared"


def test_step_latency_bars_put_each_gpu_on_its_own_floor(tmp_path):
    data = _ablation(tmp_path, {(64, "pearl-s4"): [90.0] * 5, (64, "pearl-s5"): [80.0] * 5})
    bars = step_latency_bars(ablation_step(data, 5), [("GLM 5.3", 64), ("Kimi K3", 64)])
    assert len(bars) == 8
    h4, h5, b4, b5 = bars[:4]
    assert h4[0] == "H200 stage 4: GLM 5.3 64 tok" and h4[1] == pytest.approx(90e-6)
    assert h4[2].startswith("replayed from") and h4[3] > 0
    assert b4[0].startswith("B200 stage 4 (model)") and b4[2] == "modeled" and b5[1] < b4[1]
    assert b4[3] != h4[3]  # the B200 bar has the B200 floor
    missing = bars[4]  # Kimi K3 was not in the run: an empty bar that says why
    assert missing[1] is None and missing[2].startswith("not measured")
    live = {("GLM 5.3", 64): {"prev_us": 70.0, "this_us": 60.0, "floor_us": 50.0}}
    bars = step_latency_bars(ablation_step(data, 5), [("GLM 5.3", 64)], live=live,
                             live_source="live on H200X")  # fmt: skip
    assert bars[0][1] == pytest.approx(70e-6) and bars[0][2] == "live on H200X"
    with pytest.raises(ValueError):
        step_latency_bars(None)


def test_gpu_check_lines_find_a_stage(tmp_path):
    path = tmp_path / "H200" / "gpu_checks.txt"
    path.parent.mkdir(parents=True)
    path.write_text("# memcheck run\nstage 3: {'ok': True}\nstage 4: {'ok': True}\n# racecheck\n"
                    "stage 4: clean\n")  # fmt: skip
    assert gpu_check_lines(4, root=tmp_path) == [
        "memcheck run: stage 4: {'ok': True}",
        "racecheck: stage 4: clean",
    ]
    assert gpu_check_lines(7, root=tmp_path) == []
    assert gpu_check_lines(4, root=tmp_path / "none") == []


# ---------------------------------------------------------------------------- code views
def test_excerpt_between_markers_with_line_numbers():
    code, where = get_excerpt(PERSISTENT, "# stage 4: registers -> global", "acc_state,", extra=1)
    lines = code.splitlines()
    assert lines[0].startswith("# stage 4") and lines[1].startswith(
        "acc_state = self.store_tile_direct("
    )
    assert lines[-1] == ")"
    path, _, span = where.rpartition(":")
    first, last = map(int, span.split("-"))
    assert path == "pearl_moe/kernels/sm100/stage3_persistent.py" and last - first == len(lines) - 1
    text = (Path(__file__).resolve().parent.parent / path).read_text().splitlines()
    assert text[first - 1].strip() == lines[0]
    one, _ = get_excerpt(PERSISTENT, "if cutlass.const_expr(self.wide_b):", occurrence=2)
    assert one == "if cutlass.const_expr(self.wide_b):"
    with pytest.raises(LookupError, match="fewer than"):
        get_excerpt(PERSISTENT, "no such line in the kernel")
    with pytest.raises(LookupError, match="no line after"):
        get_excerpt(PERSISTENT, "# stage 4: registers -> global", "no such end marker")
    view = show_excerpt(PERSISTENT, "# stage 4: registers", title="epilogue")
    assert view.panels[0][0].startswith("epilogue — pearl_moe/kernels/sm100/stage3_persistent.py:")


def test_side_by_side_titles_each_view():
    a = SourceView([("a.py:1", "x = 1")])
    b = SourceView([("b.py:2", "y = 2")])
    pair = side_by_side(a, b)
    assert [t for t, _ in pair.panels] == [
        "Blackwell (sm_100a) — a.py:1",
        "Hopper (sm_90a) — b.py:2",
    ]
    assert side_by_side(a, b, titles=("L", "R")).panels[1][0] == "R — b.py:2"
    three = side_by_side(a, b, a)
    assert [t for t, _ in three.panels] == ["a.py:1", "b.py:2", "a.py:1"]


def test_gemm_families_skip_the_descriptor_pre_kernel():
    sass = """
//--------------------- .text.kernel_cutlass_write_descriptors_pearl_moe_xyz --------------------------
        /*0240*/                   STG.E.ENL2.256 desc[UR4][R4.64+0x20], R12, R16 ;
//--------------------- .text.kernel_cutlass_persistent_kernel_pearl_moe_abc --------------------------
        /*0010*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0030*/               @P0 UTMASTG.2D [UR12], [UR4] ;
"""
    fams = gemm_families(SimpleNamespace(sass=sass))
    assert fams["UTC*MMA (tcgen05.mma)"] == 1 and fams["UTMASTG (TMA store)"] == 1
    assert fams["STG.E.ENL2.256"] == 0
    with pytest.raises(LookupError):
        gemm_families(
            SimpleNamespace(sass=sass.split("//--------------------- .text.kernel_cutlass_p")[0])
        )


# ---------------------------------------------------------------------------- figures
def test_stage_budget_figure_draws_both_gpus_and_tmem():
    fig = plot_stage_budgets([6, 7])
    titles = [ax.get_title() for ax in fig.axes]
    assert any("B200" in t and "budget model" in t for t in titles)
    assert any("H200" in t and "budget model" in t for t in titles)
    assert sum("TMEM" in t for t in titles) == 2 and any("stage 7" in t for t in titles)


def test_stage_occupancy_figure_is_a_model_with_one_map_per_cell():
    problems = [make_problem("GLM 5.3", 64), make_problem("Kimi K3", 64)]
    fig = plot_stage_occupancy(
        {"a": stage_config("sm_100a", 6), "b": stage_config("sm_100a", 7)}, problems
    )
    assert len(fig.axes) == 4
    assert "no measurement" in fig._suptitle.get_text()
    assert "256 tiles, 4 round(s)" in fig.axes[2].get_title()  # 2-CTA 256 x 512 at GLM 5.3


def test_ablation_step_figure_says_measured_and_where(tmp_path):
    data = _ablation(tmp_path, {(64, "pearl-s6"): [10.0] * 5, (64, "pearl-s7"): [9.0] * 5})
    ax = plot_ablation_step(ablation_step(data, 7)).axes[0]
    assert "measured" in ax.get_title() and "replayed from" in ax.get_title()
    empty = plot_ablation_step(None).axes[0]
    assert any("no recorded" in t.get_text() for t in empty.texts)


# ---------------------------------------------------------------------------- live step
def test_time_step_live_times_both_stages_interleaved(monkeypatch):
    from dataclasses import asdict

    from pearl_moe.bench import harness
    from pearl_moe.bench.harness import Timing
    from pearl_moe.course import live

    asked = {}

    def fake_interleaved(impls, problem, rounds, reps):
        asked.update(names=list(impls), rounds=rounds)
        prev = Timing.from_rounds([[100e-6]] * 4 + [[104e-6]], 10, 1)
        this = Timing.from_rounds([[90e-6]] * 4 + [[95e-6]], 10, 1)
        prev.outputs_ok = this.outputs_ok = True
        cfg = asdict(stage_config("sm_90a", 5).resolved())
        return {"prev": (prev, cfg), "this": (this, cfg)}

    monkeypatch.setattr(harness, "time_interleaved", fake_interleaved)
    row = live.time_step_live(5, make_problem("GLM 5.3", 64), floor_s=80e-6)
    assert asked == {"names": ["prev", "this"], "rounds": 5}
    assert row["prev_us"] == pytest.approx(100) and row["this_us"] == pytest.approx(90)
    assert row["ratio"] == pytest.approx(0.9, abs=1e-3) and row["verdict"] == "faster"
    assert row["this_pct_floor"] == pytest.approx(80 / 90 * 100)
    assert row["status"] == ("ok", "ok") and row["outputs_ok"]
    assert row["this_config"].startswith("sm_90a 64x128x64")
    line = live.format_live_step(row, 5, "live on H200X")
    assert line.startswith("live on H200X, GLM 5.3 64 tok: stage 4 100.0 us, stage 5 90.0 us")
    assert "(faster)" in line and line.endswith("ok")

    def failing(impls, problem, rounds, reps):
        good = Timing.from_rounds([[1e-4]] * 5, 10, 1)
        return {"prev": (good, {}), "this": (RuntimeError("boom"), {})}

    monkeypatch.setattr(harness, "time_interleaved", failing)
    row = live.time_step_live(5, make_problem("GLM 5.3", 64))
    assert row["status"][1].startswith("error: RuntimeError") and "ratio" not in row
    assert "not both timed" in live.format_live_step(row, 5, "live")


# ---------------------------------------------------------------------------- the notebooks' claims
@pytest.fixture(scope="module")
def committed():
    data = load_kernel_results(kind="ablation")
    if data is None:
        pytest.skip("no committed results/H200/ablation.json")
    return {s: ablation_step(data, s) for s in (4, 5, 6, 7)}


def test_notebook_05_claims(committed):
    g = committed[4]["geomean"]
    assert abs(g["decode"]["geomean"] - 1) < 0.03  # "close to 1"
    resolved = [
        r for r in committed[4]["rows"] if r["tokens"] <= 256 and r["verdict"] != "within noise"
    ]
    assert resolved and all(0.93 <= r["ratio"] <= 0.995 for r in resolved)  # "1-6% faster"
    assert g["decode"]["slower"] == 0
    assert g["prefill"]["slower"] == 2 and g["prefill"]["geomean"] > 1  # "in every round on two"


def test_notebook_06_claims(committed):
    rows = committed[5]["rows"]
    decode = [r for r in rows if r["tokens"] <= 256]
    assert all(r["ratio"] < 1 for r in decode)  # "faster on every shape"
    assert all(r["verdict"] == "slower" for r in rows if r["tokens"] == 4096)
    best = min(committed, key=lambda s: committed[s]["geomean"]["decode"]["geomean"])
    assert best == 5  # "the largest step of the course on the H200" at decode


def test_notebook_07_claims(committed):
    g = committed[6]["geomean"]
    assert abs(g["decode"]["geomean"] - 1) < 0.01  # "at decode it changes nothing measurable"
    assert g["decode"]["faster"] == g["decode"]["slower"] == 0
    assert g["prefill"]["faster"] == 3  # "a lot at 4096 tokens"


def test_notebook_08_claims(committed):
    g = committed[7]["geomean"]
    assert abs(g["decode"]["geomean"] - 1) < 0.02  # "a wash"
    prefill = [r for r in committed[7]["rows"] if r["tokens"] == 4096]
    assert all(r["verdict"] == "faster" and 0.83 <= r["ratio"] <= 0.97 for r in prefill)  # 4-16%


@pytest.fixture(scope="module")
def walk_run():
    from pearl_moe.bench.records import read_run
    from pearl_moe.course.results import results_path

    path = results_path("walk.json")
    if not path.exists():
        pytest.skip("no committed results/H200/walk.json")
    return read_run(path)


def _walk_ratio(run, model, tokens, num, den):
    from pearl_moe.bench.compare import paired_ratio

    pid = f"{model}|gate_up|{tokens}|EP8|balanced"
    by = {r["impl"]: r for r in run["records"] if r["problem"] == pid and r["status"] == "ok"}
    return paired_ratio(by[num], by[den])["ratio"]


def test_notebook_08_and_09_walk_claims(walk_run):
    models = ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3")
    # 09: warp-parallel / serial at 4096 tokens: 1.06-1.20x with stage 6, 0.98-1.09x with stage 7
    for m in models:
        assert 1.05 <= _walk_ratio(walk_run, m, 4096, "pearl-s6", "pearl-s6:walk=serial") <= 1.21
        assert 0.97 <= _walk_ratio(walk_run, m, 4096, "pearl-s7", "pearl-s7:walk=serial") <= 1.10
        for t in (16, 64):  # "equal at 16-64 tokens"
            assert abs(_walk_ratio(walk_run, m, t, "pearl-s6", "pearl-s6:walk=serial") - 1) < 0.01
    # 09: the serial walk 3-6% slower at 1 token for DeepSeek V4 Pro and Kimi K3
    for m in models[1:]:
        assert 0.93 <= _walk_ratio(walk_run, m, 1, "pearl-s6", "pearl-s6:walk=serial") <= 0.975
    # 08: with the serial walk, stage 7 / stage 6 at 4096 splits three ways
    s7_s6 = [
        _walk_ratio(walk_run, m, 4096, "pearl-s7:walk=serial", "pearl-s6:walk=serial")
        for m in models
    ]
    assert abs(s7_s6[0] - 1) < 0.02 and 1.12 <= s7_s6[1] <= 1.17 and 0.88 <= s7_s6[2] <= 0.92


def test_notebook_09_power_cap_claims():
    """Section 11: every power-probe cell at the cap; the clock range; cold against steady."""
    import json
    import statistics

    from pearl_moe.course.results import results_path

    path = results_path("power/power_probe.json")
    if not path.exists():
        pytest.skip("no committed results/H200/power/power_probe.json")
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


def test_notebook_09_walk_evidence_claims(walk_run):
    """Section 11: the source counters, and the polling build's walk ratios."""
    import json

    from pearl_moe.bench.records import read_run
    from pearl_moe.course.results import results_path

    counters = json.loads(results_path("power/walk_source_counters.json").read_text())
    warp, serial = counters["warp-parallel"], counters["serial"]
    assert 1.12 <= warp["samples"] / serial["samples"] <= 1.14  # "13% more"
    for s in (warp, serial):
        assert s["walk_code"]["samples"] / s["samples"] < 0.01  # "under 1%"
    assert warp["mbarrier_waits"]["samples"] > serial["mbarrier_waits"]["samples"]
    assert (
        0.9e6 <= warp["nanosleeps_taken"] <= 0.95e6
        and 0.14e6 <= serial["nanosleeps_taken"] <= 0.16e6
    )
    spin = read_run(results_path("history/walk_spin_acquire.json.gz"))
    expected = {"GLM 5.3": (1.07, 1.11), "DeepSeek V4 Pro": (1.14, 1.20), "Kimi K3": (1.03, 1.06)}
    for model, (polling, committed) in expected.items():
        args = (model, 4096, "pearl-s6", "pearl-s6:walk=serial")
        spin_ratio = _walk_ratio(spin, *args)
        walk_ratio = _walk_ratio(walk_run, *args)
        # the notebook prints ratios of medians; paired ratios agree to within 1%
        assert abs(spin_ratio - polling) < 0.015 and abs(walk_ratio - committed) < 0.015
        assert spin_ratio > 1.02  # the gap stays


def test_notebook_09_and_04_hbm_reread_claims():
    """Section 11 (and notebook 04): HBM bytes read against the model's count, both ncu runs."""
    from pearl_moe.course.profiles import hbm_reads

    reads = hbm_reads()
    if reads is None:
        pytest.skip("no committed results/H200/power/ncu_dram_bytes.json")
    ratio, time = {}, {}
    for r in reads["rows"]:
        key = (r["impl"], r["model"], r["tokens"])
        ratio.setdefault(key, []).append(r["ratio"])
        time.setdefault(key, []).append(r["seconds"])

    def span(pred):
        values = [r for key, rs in ratio.items() if pred(*key) for r in rs]
        return min(values), max(values)

    kimi_1024 = ("pearl-s5", "pearl-s3:tile_m=64+tile_n=64")
    lo, hi = span(
        lambda i, m, t: t <= 1024 and not (m == "Kimi K3" and t == 1024 and i in kimi_1024)
    )
    assert 0.93 <= lo and hi <= 1.025  # "0.93-1.02x at 256 and 1024 tokens, except ..."
    assert 1.9 <= ratio[("pearl-s5", "Kimi K3", 1024)][0] <= 1.95  # "stage 5 reads 1.9x"
    assert 1.55 <= ratio[("pearl-s3:tile_m=64+tile_n=64", "Kimi K3", 1024)][0] <= 1.65
    fine = ("pearl-s3", "pearl-s7", "tile_n=192", "tile_n=256")
    lo, hi = span(
        lambda i, m, t: t == 4096 and i.endswith(fine) and "tile_m=64+tile_n=192" not in i
    )
    assert 0.935 <= lo and hi <= 1.265  # "0.94-1.26x"
    for tag, (a, b) in {
        "pearl-s3:tile_m=64+tile_n=64": (2.8, 4.7),
        "pearl-s5": (2.7, 4.5),
        "pearl-s3:tile_m=128+tile_n=64": (1.8, 2.9),
        "pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1": (1.15, 3.3),
    }.items():
        lo, hi = span(lambda i, m, t, tag=tag: t == 4096 and i == tag)
        assert a - 0.05 <= lo and hi <= b + 0.05 and hi >= b - 0.05, (tag, lo, hi)
    s6 = {m: ratio[("pearl-s6", m, 4096)] for m in ("GLM 5.3", "Kimi K3", "DeepSeek V4 Pro")}
    serial = {m: ratio[("pearl-s6:walk=serial", m, 4096)] for m in s6}
    assert all(2.2 <= r <= 2.55 for m in ("GLM 5.3", "Kimi K3") for r in s6[m])
    assert (
        all(1.09 <= r <= 1.24 for r in serial["GLM 5.3"]) and 2.05 <= serial["Kimi K3"][0] <= 2.15
    )
    assert all(0.97 <= r <= 1.12 for r in s6["DeepSeek V4 Pro"] + serial["DeepSeek V4 Pro"])

    def gap(model):
        return [
            w / s
            for w, s in zip(
                time[("pearl-s6", model, 4096)],
                time[("pearl-s6:walk=serial", model, 4096)],
                strict=True,
            )
        ]

    assert all(1.21 <= g <= 1.30 for g in gap("GLM 5.3"))  # "1.22-1.30x"
    assert 1.17 <= gap("Kimi K3")[0] <= 1.19
    assert all(1.015 <= g <= 1.03 for g in gap("DeepSeek V4 Pro"))  # "2-3%"


def test_notebook_09_l2_sources_claim():
    """Section 11: with the warp-parallel walk, 16% more L2 sectors from TMA, 29% more misses."""
    from pearl_moe.course.profiles import ncu_metrics
    from pearl_moe.course.results import results_path

    path = results_path("power/ncu_l2_sources.csv")
    if not path.exists():
        pytest.skip("no committed results/H200/power/ncu_l2_sources.csv")
    by = ncu_metrics(path)
    warp, serial = by[0], by[1]  # pearl-s6, pearl-s6:walk=serial (scripts/device_l2_sources.sh)
    sectors = "lts__t_sectors_srcunit_tex_op_read.sum"
    misses = "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"
    assert 1.155 <= warp[sectors] / serial[sectors] <= 1.165
    assert 1.285 <= warp[misses] / serial[misses] <= 1.295


def test_notebook_09_arranged_order_claims():
    """Section 10: the compare run with the arranged order, and its neighbour effect."""
    import statistics

    from pearl_moe.bench.compare import compare_summary
    from pearl_moe.bench.records import read_run
    from pearl_moe.course.results import results_path

    path = results_path("history/compare_arranged_order.json.gz")
    if not path.exists():
        pytest.skip("no committed arranged-order compare run")
    run = read_run(path)
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


def test_notebook_04_l2_merge_claims():
    """Notebook 04: L2 requests against the sectors the TMA boxes hold (GLM 5.3, 4096 tokens)."""
    from pearl_moe.bench.baselines import parse_variant, variant_config
    from pearl_moe.budget import resolve
    from pearl_moe.course.profiles import ncu_metrics
    from pearl_moe.course.results import results_path
    from pearl_moe.hardware import H200
    from pearl_moe.perfmodel import _structure

    path = results_path("power/ncu_glm4096.csv")
    if not path.exists():
        pytest.skip("no committed results/H200/power/ncu_glm4096.csv")
    impls = [  # the order of scripts/device_power_probe.sh's Nsight Compute step
        "pearl-s3",
        "pearl-s5",
        "pearl-s6",
        "pearl-s6:walk=serial",
        "pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true",
        "pearl-s7:tile_m=128+tile_n=128+shift_a_box=true",
        "pearl-s3:tile_m=128+tile_n=256+ring_depth=4",
        "pearl-s3:tile_m=64+tile_n=64",
        "pearl-s3:tile_m=64+tile_n=256",
    ]
    by = ncu_metrics(path)
    p = make_problem("GLM 5.3", 4096, ep=8)
    merge = {}
    for i, name in enumerate(impls):
        stage, overrides = parse_variant(name)
        c = resolve(variant_config("sm_90a", stage, overrides), H200)
        _, _, tiles = _structure(tuple(p.counts), p.k, p.n, c, stage, H200.sms)
        box_sectors = tiles * (p.k // c.tile_k) * (c.cta_tile_m + c.cta_tile_n) * c.tile_k * 2 / 32
        merge[name] = by[i]["lts__t_sectors.sum"] / box_sectors
    assert 0.545 <= min(merge.values()) and max(merge.values()) <= 0.965  # "0.55-0.96"
    assert 0.545 <= merge[impls[8]] <= merge[impls[4]] <= 0.605  # 64 x 256
    assert 0.605 <= merge[impls[6]] <= 0.615 and 0.955 <= merge[impls[7]] <= 0.965
    requests = {name: by[i]["lts__t_requests.sum"] for i, name in enumerate(impls)}
    assert 0.77 <= requests["pearl-s6"] / requests["pearl-s5"] <= 0.79  # "cut by 22%"
    assert 165e6 <= requests[impls[5]] <= 170e6 and 169e6 <= requests["pearl-s3"] <= 171e6


def test_notebook_09_queued_predecessor_claims():
    """Section 10: the neighbour effect in isolation, queued and after a pause."""
    import json

    from pearl_moe.course.results import results_path

    def cell(path):
        rows = json.loads(path.read_text())["rows"]
        return {(r["before"], r["gap_ms"]): r["median_us"] for r in rows}

    expected = {  # model: (queued, synchronized without a pause) slowdown after quack-tuned
        "deepseek_v4_pro": (1.025, 1.007),
        "kimi_k3": (1.021, 1.020),
    }
    for name, (queued, synced) in expected.items():
        path = results_path(f"history/predecessor_gap_queued_{name}_64.json")
        if not path.exists():
            pytest.skip("no committed queued predecessor test")
        t = cell(path)
        assert abs(t[("quack-tuned", -1.0)] / t[("pearl", -1.0)] - queued) < 0.0015
        assert abs(t[("quack-tuned", 0.0)] / t[("pearl", 0.0)] - synced) < 0.0015
        assert abs(t[("quack-tuned", 100.0)] / t[("pearl", 100.0)] - 1) <= 0.005
        for gap in (-1.0, 0.0, 100.0):
            assert abs(t[("triton", gap)] / t[("pearl", gap)] - 1) <= 0.006


def test_notebook_09_reread_bandwidth_claim():
    """Section 11: the kernels that re-read from HBM use 1.5-3.1 TB/s of it, below the ceiling."""
    from pearl_moe.course.profiles import hbm_reads

    reads = hbm_reads()
    if reads is None:
        pytest.skip("no committed results/H200/power/ncu_dram_bytes.json")
    rereaders = (
        "pearl-s5",
        "pearl-s6",
        "pearl-s3:tile_m=64+tile_n=64",
        "pearl-s3:tile_m=128+tile_n=64",
    )
    rates = [
        r["dram_bytes"] / r["seconds"] / 1e12
        for r in reads["rows"]
        if r["tokens"] == 4096 and r["impl"] in rereaders
    ]
    assert len(rates) == 20 and 1.5 <= min(rates) and max(rates) <= 3.1


def test_notebook_09_schedule_claims():
    """Section 12: static against dynamic (and scattered) tile schedules."""

    from pearl_moe.bench.records import read_run
    from pearl_moe.course.profiles import REQUESTS, hbm_reads, ncu_export
    from pearl_moe.course.results import results_path, schedule_ratios

    if not results_path("schedule/schedule.json.gz").exists():
        pytest.skip("no committed results/H200/schedule/")
    reads = hbm_reads(name="schedule/ncu_schedule.json")["rows"]
    dynamic = {(r["model"], r["impl"]): r["ratio"] for r in reads if "dynamic" in r["impl"]}
    static = [r["ratio"] for r in reads if "schedule=" not in r["impl"]]
    odd = ("GLM 5.3", "pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1+schedule=dynamic")
    rest = [v for key, v in dynamic.items() if key != odd]
    assert round(min(rest), 2) == 0.87 and round(max(rest), 2) == 1.39  # "0.87-1.39x"
    assert round(dynamic[odd], 2) == 2.05 and round(max(static), 2) == 4.45
    shed = []  # static / dynamic HBM bytes of 64 x 64 and 128 x 64 tiles: "shed 2.2-4.5x"
    for r in reads:
        if r["impl"] in ("pearl-s3:tile_m=64+tile_n=64", "pearl-s3:tile_m=128+tile_n=64"):
            shed.append(r["ratio"] / dynamic[(r["model"], r["impl"] + "+schedule=dynamic")])
    assert round(min(shed), 1) == 2.2 and round(max(shed), 1) == 4.5

    run = read_run(results_path("schedule/schedule.json.gz"))
    ratio = schedule_ratios(run, "dynamic")  # (kernel, model, tokens) -> dynamic / static

    def at(tokens, *bases):
        return [v for (b, _, t), v in ratio.items() if t == tokens and (not bases or b in bases)]

    s5 = at(4096, "pearl-s5")
    assert round(min(s5), 2) == 0.77 and round(max(s5), 2) == 0.91  # "0.77-0.91x"
    narrow = at(4096, "pearl-s3:tile_m=64+tile_n=64", "pearl-s3:tile_m=128+tile_n=64")
    assert 0.925 <= min(narrow) < 0.94 and max(at(4096)) > 1.1  # "at most 7%", "some slower"
    assert all(0.95 <= v <= 1.05 for v in at(64))  # "within 5%"
    assert round(max(at(1024)), 2) == 1.37  # "up to 1.37x slower"
    assert round(ratio[("pearl-s5", "Kimi K3", 1024)], 2) == 0.91  # "it gains (0.91x)"
    wide = at(1024, "pearl-s3:tile_m=128+tile_n=256+ring_depth=4")
    wide += at(4096, "pearl-s3:tile_m=128+tile_n=256+ring_depth=4")
    assert all(0.95 <= v <= 1.055 for v in wide)  # "within about 5%": the default call's tile

    pairs = ncu_export("schedule/ncu_pairs.json")["runs"]["1"]
    ds = pairs["DeepSeek V4 Pro|1024"]
    got = [
        round(ds[f"pearl-s5{s}"][REQUESTS] / 1e6)
        for s in ("", ":schedule=dynamic", ":schedule=scattered")
    ]
    assert got == [63, 91, 97]
    rise = []  # notebook 04: dynamic or scattered "raises the count 1.4-1.9x"
    for key in ("DeepSeek V4 Pro|1024", "GLM 5.3|1024"):
        by = pairs[key]
        for other in (":schedule=dynamic", ":schedule=scattered"):
            rise.append(by["pearl-s5" + other][REQUESTS] / by["pearl-s5"][REQUESTS])
    assert round(min(rise), 1) == 1.4 and round(max(rise), 1) == 1.9
    prun = read_run(results_path("schedule/pairs.json.gz"))
    pmed = {(r["problem"], r["impl"]): r["time"]["median_us"] for r in prun["records"]}
    cases = 0
    for (pid, impl), t in pmed.items():
        if impl.endswith(":schedule=scattered"):
            base = impl.split(":")[0]
            assert t > max(pmed[(pid, base)], pmed[(pid, base + ":schedule=dynamic")]), pid
            cases += 1
    assert cases == 12  # "slowest of the three in all twelve cases"


def test_notebook_09_lockstep_claims():
    """Section 12, the lockstep schedule: every number of its paragraph, the takeaway and the
    notebook's closing list, from the two interleaved runs and the Nsight Compute export."""
    from pearl_moe import calibrate
    from pearl_moe.bench.records import read_run
    from pearl_moe.course.profiles import hbm_reads, ncu_export
    from pearl_moe.course.results import results_path, schedule_ratios

    names = ("schedule/lockstep.json.gz", "schedule/lockstep_2.json.gz")
    if not all(results_path(n).exists() for n in names):
        pytest.skip("no committed results/H200/schedule/lockstep*.json.gz")
    runs = [read_run(results_path(n)) for n in names]
    lock = [schedule_ratios(run, "lockstep") for run in runs]
    dyn = schedule_ratios(runs[0], "dynamic")

    def span(pick, maps=lock):
        values = [v for m in maps for key, v in m.items() if pick(*key)]
        return round(min(values), 2), round(max(values), 2)

    assert span(lambda b, m, t: b == "pearl-s5" and t == 4096) == (0.68, 0.88)
    assert span(lambda b, m, t: b == "pearl-s5" and t == 4096, [dyn]) == (0.74, 0.91)
    kimi = ("pearl-s4", "pearl-s5")
    assert span(lambda b, m, t: b in kimi and m == "Kimi K3" and t == 1024) == (0.83, 0.86)
    assert span(lambda b, m, t: b == "pearl-s6" and t == 4096) == (0.87, 0.98)
    assert span(lambda b, m, t: b == "pearl-s3" and t >= 1024) == (0.99, 1.04)
    assert span(lambda b, m, t: t == 64) == (0.99, 1.05)
    assert span(lambda b, m, t: b == "pearl-s7" and t >= 1024) == (0.94, 1.04)
    assert span(lambda b, m, t: b == "pearl-s5" and m == "GLM 5.3" and t == 1024) == (1.09, 1.10)
    assert max(v for m in lock for v in m.values()) < 1.105  # "cost up to 10%"

    # Nsight Compute: the static kernels that re-read, and their lockstep twins
    rows = hbm_reads(name="schedule/ncu_lockstep.json")["rows"]
    reads = {(r["model"], r["tokens"], r["impl"]): r for r in rows}
    rereaders = [k for k, r in reads.items() if "lockstep" not in k[2] and r["ratio"] > 1.5]
    assert len(rereaders) == 8
    assert {(m, t, i[-1]) for m, t, i in rereaders} == {
        ("DeepSeek V4 Pro", 4096, "5"), ("GLM 5.3", 4096, "5"), ("Kimi K3", 4096, "5"),
        ("Kimi K3", 1024, "5"), ("Kimi K3", 1024, "4"), ("Kimi K3", 4096, "4"),
        ("GLM 5.3", 4096, "6"), ("Kimi K3", 4096, "6"),
    }  # fmt: skip
    before = [reads[k]["ratio"] for k in rereaders]
    after = [reads[(m, t, i + ":schedule=lockstep")]["ratio"] for m, t, i in rereaders]
    assert (round(min(before), 2), round(max(before), 2)) == (1.67, 4.38)
    assert (round(min(after), 2), round(max(after), 2)) == (0.94, 1.33)
    assert round(reads[("Kimi K3", 1024, "pearl-s4:schedule=lockstep")]["ratio"], 2) == 0.98
    export = ncu_export("schedule/ncu_lockstep.json")["runs"]["1"]
    hit = "lts__t_sector_hit_rate.pct"
    k4096 = export["Kimi K3|4096"]
    assert (
        round(k4096["pearl-s5"][hit]) == 47
        and round(k4096["pearl-s5:schedule=lockstep"][hit]) == 86
    )
    req, one = [], []
    for per in export.values():
        for s in (4, 5, 6, 7):
            static, twin = per[f"pearl-s{s}"], per[f"pearl-s{s}:schedule=lockstep"]
            req.append(twin["lts__t_requests.sum"] / static["lts__t_requests.sum"])
            one.append(twin["gpu__time_duration.sum"] / static["gpu__time_duration.sum"])
    assert (round(min(req), 2), round(max(req), 2)) == (0.82, 1.37)
    assert (round(min(one), 2), round(max(one), 2)) == (0.81, 1.32)
    # sustained (interleaved) time / one cold launch at 4096 tokens, both runs
    load = {"static": [], "lockstep": []}
    for run in runs:
        for r in run["records"]:
            model, _, tokens = r["problem"].split("|")[:3]
            cold = export.get(f"{model}|{tokens}", {}).get(r["impl"])
            if r["status"] == "ok" and cold and tokens == "4096":
                side = "lockstep" if "lockstep" in r["impl"] else "static"
                load[side].append(r["time"]["median_us"] / (cold["gpu__time_duration.sum"] / 1e3))
    assert (round(min(load["static"]), 2), round(max(load["static"]), 2)) == (1.08, 1.50)
    assert (round(min(load["lockstep"]), 2), round(max(load["lockstep"]), 2)) == (1.02, 1.14)

    # the model, not fitted on these runs: lockstep records and their static twins
    records = calibrate.load_records(files=[results_path(n) for n in names])[0]
    rows = calibrate.evaluate(records)
    for schedule, worst, mid in (("lockstep", 0.156, 0.054), ("static", 0.257, 0.057)):
        errs = sorted(
            abs(row["error"])
            for rec, row in zip(records, rows, strict=True)
            if rec.config.schedule == schedule
        )
        assert len(errs) == 75
        assert round(errs[-1], 3) == worst and round(float(np.median(errs)), 3) == mid

"""The stage notebooks' helpers (05-08): one ablation step, its latency bars, code excerpts, SASS of
the GEMM kernel, the stage figures, a live step timed with a fake harness; and the claims the
notebooks make about the committed H200 ablation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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
    from pearl_moe.results import new_run, problem_entry, problem_from_entry, write_run

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
    # a live row gets bars of its own, labeled with the live GPU's name, after the replayed ones
    live = {("GLM 5.3", 64): {"prev_us": 70.0, "this_us": 60.0, "floor_us": 50.0}}
    where = "live on NVIDIA H100 80GB HBM3"
    bars = step_latency_bars(ablation_step(data, 5), [("GLM 5.3", 64)], live=live,
                             live_source=where)  # fmt: skip
    assert len(bars) == 6 and bars[0][:3] == h4[:3]
    assert bars[2][0] == "H100 stage 4: GLM 5.3 64 tok (live)" and bars[3][0].startswith("H100")
    assert bars[2][1] == pytest.approx(70e-6) and bars[2][2] == where
    assert not [b for b in bars if b[0].startswith("H200") and b[2] == where]
    with pytest.raises(ValueError):
        step_latency_bars(None)


def test_step_latency_bars_take_the_gpu_from_the_run(tmp_path):
    from pearl_moe.course.measurements import gpu_label

    data = _ablation(tmp_path, {(64, "pearl-s4"): [90.0] * 5, (64, "pearl-s5"): [80.0] * 5})
    data["env"]["gpu"] = "NVIDIA H100 80GB HBM3"
    step = ablation_step(data, 5)
    assert step["gpu"] == "H100" and gpu_label(data) == "H100"
    assert step_latency_bars(step)[0][0] == "H100 stage 4: GLM 5.3 64 tok"
    assert gpu_label({"env": {}}) == "an unnamed GPU" and gpu_label("NVIDIA RTX 9000") == "RTX 9000"


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

    # Stage 2 against the stage-1 loop, whose config also counts its launches.
    def loop_and_grouped(impls, problem, rounds, reps):
        prev = Timing.from_rounds([[100e-6]] * 5, 10, 1)
        this = Timing.from_rounds([[50e-6]] * 5, 10, 1)
        cfg = asdict(stage_config("sm_90a", 2).resolved())
        return {"prev": (prev, {**cfg, "launches": 32}), "this": (this, cfg)}

    monkeypatch.setattr(harness, "time_interleaved", loop_and_grouped)
    row = live.time_step_live(2, make_problem("GLM 5.3", 64))
    assert row["prev_config"].endswith(", 32 launches") and "launches" not in row["this_config"]
    assert row["ratio"] == pytest.approx(0.5, abs=1e-3)

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
        pytest.skip("no committed results/H200/ablation.json.gz")
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
    from pearl_moe.results import read_run, run_path

    path = run_path("H200", "walk")
    if not path.exists():
        pytest.skip("no committed results/H200/walk.json.gz")
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

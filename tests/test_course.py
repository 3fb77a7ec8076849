"""The notebooks' helpers: machine detection, source display, replayed results, store emulation."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from pearl_moe import course
from pearl_moe.course import (
    Machine,
    baseline,
    check_table,
    correctness_summary,
    describe_run,
    detect_machine,
    diff_stats,
    families_table,
    floor_series,
    get_source,
    kernel_rows,
    load_kernel_results,
    measurement_source,
    plot_latency_bars,
    plot_recorded_vs_tokens,
    plot_stage_sweep,
    results_path,
    run_printing,
    sass_by_kernel,
    sass_lines,
    say_model,
    show_diff,
    show_pair,
    show_source,
    simulate_tile_stores,
    source_diff,
    stage_series,
    stage_sweep,
)
from pearl_moe.course.doc_tables import STAGES
from pearl_moe.model import calibrate
from pearl_moe.workloads import make_problem

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


# ---------------------------------------------------------------------------- machine
def test_forced_cpu_machine_is_replay():
    m = detect_machine(force="cpu")
    assert m.mode == "cpu" and not m.live and m.arch is None
    assert "CPU replay" in m.describe()


def test_env_forces_cpu(monkeypatch):
    monkeypatch.setenv(course.FORCE_ENV, "cpu")
    assert detect_machine().mode == "cpu"


def test_bad_force_raises():
    with pytest.raises(ValueError):
        detect_machine(force="b200")


def test_live_machines_describe_their_arch():
    b = Machine("blackwell", "NVIDIA B200", (10, 0))
    h = Machine("hopper", "NVIDIA H200", (9, 0))
    assert b.live and b.arch == "sm_100a" and "sm_100" in b.describe()
    assert h.live and h.arch == "sm_90a" and "performance model" in h.describe()


# ---------------------------------------------------------------------------- source
def test_source_of_a_method_without_importing_cutlass():
    import sys

    had = "cutlass" in sys.modules
    code, where = get_source("pearl_moe.kernels.sm100.common:KernelBase.mma_k_loop")
    assert code.startswith("@cute.jit\ndef mma_k_loop(")
    assert where.startswith("pearl_moe/kernels/sm100/common.py:")
    assert ("cutlass" in sys.modules) == had


def test_source_method_argument_and_objects():
    a, _ = get_source("pearl_moe.kernels.sm90.common:KernelBase", "epilogue_tile")
    assert "def epilogue_tile(" in a
    from pearl_moe.config import smem_budget

    code, where = get_source(smem_budget)
    assert code.startswith("def smem_budget(") and where.startswith("pearl_moe/config.py:")


def test_every_piece_of_code_a_notebook_shows_exists_under_a_public_name():
    """The notebooks name the code they show as ``"module:Class.method"`` strings: every one must
    resolve (a rename that breaks the course fails here, not in a learner's notebook), and none may
    name a private member (a leading underscore), so what the course teaches is the package's
    public surface."""
    import json
    import re

    from pearl_moe.course.sources import get_source

    pattern = re.compile(r"[\"'](pearl_moe(?:\.\w+)+):([\w.]*)[\"']")
    seen = set()
    for nb in sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for module, qualname in pattern.findall("".join(cell["source"])):
                seen.add((nb.name, module, qualname))
    assert len(seen) >= 30  # the stage notebooks show the kernels this way
    for name, module, qualname in sorted(seen):
        private = [p for p in qualname.split(".") if p.startswith("_") and not p.endswith("__")]
        assert not private, f"{name} shows a private member: {module}:{qualname}"
        get_source(f"{module}:{qualname}")  # LookupError / ModuleNotFoundError when it moved


def test_missing_source_raises_lookup_error():
    with pytest.raises(LookupError, match="inherited"):
        get_source("pearl_moe.kernels.sm100.stage2_grouped:GroupedGemmKernel.mma_k_loop")


def test_views_render_html_and_text():
    one = show_source("pearl_moe.kernels.scheduler:TileScheduler.seek", title="seek")
    assert "def seek(" in repr(one) and "seek" in one._repr_html_()
    pair = show_pair(
        "pearl_moe.kernels.scheduler:TileScheduler.seek",
        "pearl_moe.kernels.scheduler:TileScheduler.decode",
    )
    html = pair._repr_html_()
    assert "Blackwell (sm_100a)" in html and "Hopper (sm_90a)" in html
    assert len(pair.panels) == 2


def test_diff_between_stages():
    old = "pearl_moe.kernels.sm90.stage1_gemm:DenseGemmKernel.kernel"
    new = "pearl_moe.kernels.sm90.stage2_grouped:GroupedGemmKernel.kernel"
    diff = source_diff(old, new)
    added, removed = diff_stats(diff)
    assert added > 0 and removed > 0
    assert diff.startswith("--- pearl_moe/kernels/sm90/stage1_gemm.py")
    assert source_diff(old, old) == ""
    view = show_diff(old, new, title="x")
    assert f"+{added} / -{removed}" in view.panels[0][0]


# ---------------------------------------------------------------------------- SASS
SASS = """
//--------------------- .text.kernel_cutlass_write_descriptors_pearl_moe_xyz --------------------------
        /*0240*/                   STG.E.ENL2.256 desc[UR4][R4.64+0x20], R12, R16 ;
//--------------------- .text.kernel_cutlass_grouped_kernel_pearl_moe_abc --------------------------
        /*0010*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0020*/                   UTMALDG.2D [UR8], [UR6] ;
        /*0030*/               @P0 UTMASTG.2D [UR12], [UR4] ;
"""


def test_sass_split_by_kernel_and_table():
    from pearl_moe.course.kernel_report import count_families

    kernels = sass_by_kernel(SASS)
    assert list(kernels) == ["write_descriptors", "grouped_kernel"]
    assert kernels["grouped_kernel"]["UTCHMMA"] == 1
    fams = {name: count_families(ops) for name, ops in kernels.items()}
    table = families_table(fams, ["UTC*MMA (tcgen05.mma)", "STG.E.ENL2.256"])
    lines = table.splitlines()
    assert "write_descriptors" in lines[0]
    assert lines[1].split()[-2:] == [".", "1"]  # UTC*MMA: 0 in the writer, 1 in the GEMM
    assert lines[2].split()[-2:] == ["1", "."]


# ---------------------------------------------------------------------------- results
CEIL = {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}
ENV = {
    "gpu": "NVIDIA H200",
    "date": "2026-11-29T15:00:00+00:00",
    "driver": "580.159.04",
    "cuda": "13.0",
    "clocks": {"sm_clock_mhz": "345", "sm_clock_max_mhz": "1980", "source": "nvidia-smi"},
}


def _record(entry: dict, impl: str, us: float | None, gemm_config: dict | None = None) -> dict:
    """One record as the harness writes it (``us=None``: failed its check, so not timed)."""
    from pearl_moe.bench.harness import metrics
    from pearl_moe.results import problem_from_entry

    config = {"gemm_config": gemm_config} if gemm_config else {}
    if us is None:
        return {
            "problem": entry["id"],
            "impl": impl,
            "status": "incorrect",
            "config": config,
            "correctness": {"ok": False, "max_abs_err": 3.0, "message": "5 rows differ"},
        }
    return {
        "problem": entry["id"],
        "impl": impl,
        "status": "ok",
        "config": config,
        "time": {"median_us": us, "min_us": us, "max_us": us},
        "metrics": metrics(problem_from_entry(entry), us * 1e-6, CEIL),
        "correctness": {"ok": True, "max_abs_err": 0.01, "torch_bf16_max_abs_err": 0.01},
    }


def _stages_file(root: Path) -> Path:
    """A small ``stages`` run in the harness schema: GLM 5.3 at 16 and 64 tokens per GPU."""
    from pearl_moe.results import new_run, problem_entry, write_run

    run = new_run("stages", dict(ENV), dict(CEIL))
    times = {  # tokens -> impl -> us (None: failed its check)
        64: {"pearl-s1": 900.0, "pearl-s2": 500.0, "pearl-s3": None, "grouped_mm": 535.0},
        16: {"pearl-s1": 800.0, "pearl-s2": 470.0, "pearl-s3": 440.0},
    }
    for tokens, by_impl in times.items():
        entry = problem_entry(make_problem("GLM 5.3", tokens), CEIL)
        run["problems"].append(entry)
        run["records"] += [_record(entry, impl, us) for impl, us in by_impl.items()]
    return write_run(run, root / "H200" / "stages.json")


def _sweep_file(root: Path) -> Path:
    """A small ``stage_sweep`` run: stage 3 variants at GLM 5.3, 64 tokens per GPU."""
    from pearl_moe.config import GemmConfig
    from pearl_moe.results import new_run, problem_entry, write_run

    run = new_run("stage_sweep", dict(ENV), dict(CEIL))
    entry = problem_entry(make_problem("GLM 5.3", 64), CEIL)
    run["problems"].append(entry)
    for tile_m, stages, us in ((128, 3, 497.0), (128, 2, 498.0), (64, 2, 490.0)):
        cfg = GemmConfig(arch="sm_90a", tile_m=tile_m, tile_n=128, tile_k=64, ring_depth=stages)
        impl = f"pearl-s3:tile_m={tile_m}+stages={stages}"
        run["records"].append(_record(entry, impl, us, asdict(cfg.resolved())))
    return write_run(run, root / "H200" / "stage_sweep.json")


def test_replay_of_stage_results(tmp_path):
    path = _stages_file(tmp_path)
    assert results_path(root=tmp_path) == path
    data = load_kernel_results(root=tmp_path)
    assert data["_path"] == str(path) and data["kind"] == "stages"
    src = measurement_source(data)
    assert src.startswith("replayed from") and "2026-11-29" in src and "H200" in src
    env = describe_run(data)
    assert "SM 345 MHz (max 1980)" in env and "driver 580.159.04" in env and "4.00 TB/s" in env
    assert {r["tokens_per_gpu"] for r in kernel_rows(data, "GLM 5.3")} == {16, 64}
    assert len(kernel_rows(data, impl=3)) == 2 and kernel_rows(data, "Kimi K3") == []
    assert stage_series(data, "GLM 5.3", 2) == [(16, pytest.approx(470e-6)), (64, 500e-6)]
    assert stage_series(data, "GLM 5.3", "grouped_mm") == [(64, pytest.approx(535e-6))]
    assert stage_series(data, "GLM 5.3", 3) == [(16, pytest.approx(440e-6))]  # 64: incorrect
    floors = floor_series(data, "GLM 5.3")
    assert [t for t, _ in floors] == [16, 64] and all(f > 0 for _, f in floors)
    lines = correctness_summary(data, stages=(1, 3))
    assert len(lines) == 2
    assert "pearl-s1: pass" in lines[0] and "pearl-s3: FAIL (5 rows differ)" in lines[0]
    assert "pearl-s3: pass" in lines[1]
    assert "grouped_mm: not recorded" in correctness_summary(data, (1, "grouped_mm"))[1]


def test_replay_of_stage_sweep(tmp_path):
    _sweep_file(tmp_path)
    data = load_kernel_results(kind="stage_sweep", root=tmp_path)
    rows = stage_sweep(data, 128)
    assert [(r["tile_m"], r["ring_depth"]) for r in rows] == [(128, 2), (128, 3)]  # sorted
    assert rows[0]["seconds"] == pytest.approx(498e-6) and rows[0]["floor_seconds"] > 0
    assert [(r["tile_m"], r["ring_depth"]) for r in stage_sweep(data)] == [
        (128, 2),
        (128, 3),
        (64, 2),
    ]
    assert stage_sweep(data, 256) == []


def test_committed_stage_results_replay():
    """The committed H200 runs read through the course helpers (skipped until they exist)."""
    stages = load_kernel_results()
    sweep = load_kernel_results(kind="stage_sweep")
    if stages is None or sweep is None:
        pytest.skip("no committed stages.json / stage_sweep.json")
    assert "H200" in describe_run(stages)
    for impl in (1, 2, 3, "loop", "grouped_mm"):
        pts = stage_series(stages, "GLM 5.3", impl)
        assert len(pts) >= 2 and all(t > 0 for _, t in pts)
    lines = correctness_summary(stages, model="GLM 5.3")
    assert lines and all("pearl-s1" in ln and "pearl-s3" in ln for ln in lines)
    for tile_m in (128, 64):
        rows = stage_sweep(sweep, tile_m)
        assert len(rows) >= 2 and all(r["tile_m"] == tile_m for r in rows)
        assert [r["ring_depth"] for r in rows] == sorted(r["ring_depth"] for r in rows)


def test_a_file_that_breaks_the_schema_is_an_error(tmp_path):
    bad = tmp_path / "H200" / "stages.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"rows": []}')
    with pytest.raises(ValueError, match="schema"):
        load_kernel_results(bad)


def test_missing_results_say_so(tmp_path):
    missing = tmp_path / "nope.json"
    assert load_kernel_results(missing) is None
    assert load_kernel_results(kind="stage_sweep", root=tmp_path) is None
    assert measurement_source(None, expected=missing).startswith("no recorded measurement yet")
    assert describe_run(None) == "no recorded measurement yet"
    assert kernel_rows(None) == [] and stage_series(None, "GLM 5.3", 1) == []
    assert stage_sweep(None) == [] and correctness_summary(None) == []
    assert floor_series(None, "GLM 5.3") == []
    live = Machine("hopper", "NVIDIA H200", (9, 0))
    assert measurement_source(None, live) == "live on NVIDIA H200"


def test_baseline_replay_from_bench_records(tmp_path):
    from pearl_moe.results import new_run, problem_entry, write_run

    problem = make_problem("GLM 5.3", 64)
    ceilings = {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}
    run = new_run(
        "baselines", {"gpu": "NVIDIA H200", "date": "2026-11-29T13:55:37+00:00"}, ceilings
    )
    entry = problem_entry(problem, ceilings)
    run["problems"].append(entry)
    run["records"].append(_record(entry, "loop", 560.0))
    write_run(run, tmp_path / "H200" / "baselines.json")
    got = baseline("loop", "GLM 5.3", 64, root=tmp_path)
    assert got["seconds"] == pytest.approx(560e-6)
    assert got["floor_seconds"] == pytest.approx(entry["floor_us"] * 1e-6, rel=1e-4)
    assert "2026-11-29" in got["source"]
    assert baseline("quack", "GLM 5.3", 64, root=tmp_path) is None
    assert baseline("loop", "GLM 5.3", 64, kind="absent", root=tmp_path) is None


# ---------------------------------------------------------------------------- clipped stores
@pytest.mark.parametrize("scheme", ["per_expert", "clipped_view"])
@pytest.mark.parametrize("tile_m", [16, 64, 128])
@pytest.mark.parametrize("counts", [[3, 0, 20, 5, 17], [0, 0, 128, 0], [1], [129, 127, 256, 0, 64]])
def test_grouped_store_schemes_write_each_row_once(scheme, tile_m, counts):
    owner, writes = simulate_tile_stores(counts, tile_m, scheme)
    assert (writes == 1).all()
    assert (owner == np.repeat(np.arange(len(counts)), counts)).all()


def test_one_descriptor_over_all_rows_spills():
    owner, writes = simulate_tile_stores([3, 0, 20, 5, 17], 16, "whole")
    assert (writes > 1).any()
    with pytest.raises(ValueError):
        simulate_tile_stores([1], 16, "nonsense")


# ---------------------------------------------------------------------------- plots
def test_stage_sweep_plot_labels_measured_and_modeled():
    fig = plot_stage_sweep(
        {"tile 128x128": [(2, 5e-4), (3, 4.5e-4)]},
        {"128x128, L=1 us": [(2, 2.4e-4), (3, 2.4e-4)]},
        measured_label="replayed from results/H200/stage_sweep.json",
        measured_floor=3.8e-4,
        modeled_floor=2.0e-4,
    )
    left, right = fig.axes
    assert "measured" in left.get_title() and "modeled" in right.get_title()
    empty = plot_stage_sweep(None, {"m": [(2, 1e-4)]}, measured_label="no recorded measurement yet")
    assert any("no recorded" in t.get_text() for t in empty.axes[0].texts)


def test_latency_bars_mark_missing_and_modeled():
    fig = plot_latency_bars(
        [
            ("a", 5e-4, "replayed"),
            ("b", None, "no recorded measurement yet"),
            ("c", 2e-4, "modeled"),
        ],
        floor=3e-4,
    )
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("no recorded" in t for t in texts) and any("modeled" in t for t in texts)


# ---------------------------------------------------------------------------- notebooks
#: Every notebook that teaches a kernel stage (01a-07b), from the course map; 00d, which teaches
#: the DSL with small ``@cute.jit`` functions, is not one of them.
KERNEL_NOTEBOOKS = [
    s.notebook
    for s in STAGES
    if s.kernel_stage is not None and (NOTEBOOKS / f"{s.notebook}.ipynb").exists()
]


@pytest.mark.parametrize("name", KERNEL_NOTEBOOKS)
def test_stage_notebooks_define_no_kernel_and_label_b200_as_modeled(name):
    import nbformat

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    # a write-it-yourself cell (%%cute_compile) is the learner's kernel, not one of the stages
    code = "\n".join(
        c.source
        for c in nb.cells
        if c.cell_type == "code" and not c.source.startswith("%%cute_compile")
    )
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for kernel in ("@cute.kernel", "@cute.jit", "import cutlass"):
        assert kernel not in code, f"{name} defines a kernel outside %%cute_compile ({kernel})"
    assert "detect_machine()" in code, f"{name} never asks which machine it runs on"
    # where the kernels run: the one line that links to notebook 00, never the long paragraph
    where = (
        "**Where this runs:** the sm_90a kernels are run, verified and measured on the H200; "
        "the sm_100a kernels are compile-verified only and have never run anywhere. "
        "On a B200 this notebook tries them live; every B200 latency here is modeled. "
        "[More in notebook 00a.](00a_setup_and_tour.ipynb#Where-the-kernels-run)"
    )
    assert where in " ".join(text.split()), f"{name} lacks the one-line 'Where this runs'"
    assert "so on a real B200 `grouped_gemm` launches them" not in text, name
    assert "kernels_sm90" not in code + text, name


# ---------------------------------------------------------------------------- what was checked
def test_check_table_lists_every_recorded_problem_and_live_checks(tmp_path):
    from pearl_moe.bench.harness import CheckResult

    data = load_kernel_results(_stages_file(tmp_path))
    live_problem = make_problem("GLM 5.3", 16, routing="skewed", seed=3)
    ok = CheckResult(True, 0.01, 0.008, 0.017, 1e-3, 0, "ok")
    table = check_table(
        data, stages=(1, 3), live=[(live_problem, {1: ok})], machine=Machine("hopper", "H200X")
    )
    lines = table.splitlines()
    assert lines[0].startswith("live on H200X: 1 of 1 checks passed; replayed from")
    assert "3 of 4 recorded checks passed, 2 problems" in lines[0]
    assert lines[1].split()[:2] == ["source", "model"]
    live = [ln for ln in lines if ln.startswith("live")][1:]
    assert len(live) == 1 and "skewed" in live[0] and "not checked" in live[0]
    replayed = [ln for ln in lines if ln.startswith("replayed")]
    assert len(replayed) == 2 and any("FAIL (5 rows differ)" in ln for ln in replayed)
    assert check_table(None).startswith("no recorded measurement yet")


def test_sass_lines_match_instructions_only():
    assert sass_lines(SASS, r"UTMA") == [
        "UTMALDG.2D [UR8], [UR6] ;",
        "@P0 UTMASTG.2D [UR12], [UR4] ;",
    ]
    assert sass_lines(SASS, r"UTMASTG") == ["@P0 UTMASTG.2D [UR12], [UR4] ;"]
    assert sass_lines(SASS, r"kernel_cutlass") == []  # section headers are not instructions


def test_latency_bars_draw_each_bar_against_its_own_floor():
    fig = plot_latency_bars(
        [
            ("H200: ours", 5e-4, "replayed", 4e-4),
            ("B200: ours (model)", 3e-4, "modeled", 2e-4),
        ],
        title="GLM 5.3",
    )
    ax = fig.axes[0]
    # one panel per GPU: the measured H200 bar and the modeled B200 bar share no axis
    assert [a.get_ylabel() for a in fig.axes] == ["H200: measured", "B200: modeled"]
    ticks = [ln for a in fig.axes for ln in a.get_lines() if len(set(ln.get_xdata())) == 1]
    assert sorted(ln.get_xdata()[0] for ln in ticks) == pytest.approx([200, 400])  # us, one each
    texts = " ".join(t.get_text() for a in fig.axes for t in a.texts)
    assert "80% of its floor" in texts and "67% of its floor" in texts
    assert "model" in ax.get_title()
    # the last title line: how close the model comes to the H200 (calibrate's split)
    assert ax.get_title().splitlines()[-1] == calibrate.trust_note(
        calibrate.decode_prefill_errors()
    )
    measured_only = plot_latency_bars([("H200: ours", 5e-4, "replayed", 4e-4)], title="GLM 5.3")
    assert "calibrate" not in measured_only.axes[0].get_title()


def test_recorded_latency_plot_keeps_its_width():
    series = {
        "stage 1 loop (ours)": [(16, 8e-4), (64, 9e-4), (256, 1.2e-3)],
        "cuBLAS loop": [(16, 5e-4), (64, 6e-4), (256, 9e-4)],
        "torch._grouped_mm": [(16, 4e-4), (64, 5e-4), (256, 7e-4)],
    }
    source = "replayed from results/H200/stages.json (measured 2026-11-29 on NVIDIA H200)"
    fig = plot_recorded_vs_tokens(
        series, [(16, 3e-4), (256, 6e-4)], "H200", source, "GLM 5.3 gate+up, EP=8"
    )
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_position().width > 0.6  # the legend no longer squeezes the axes
    assert source in ax.get_title()
    assert all(len(t.get_text()) < 45 for t in ax.get_legend().get_texts())


def test_say_model_prefixes_titles_once():
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().set_title("occupancy")
    say_model(fig)
    say_model(fig)
    assert fig.axes[0].get_title() == "model: occupancy"
    fig2 = Figure()
    fig2.suptitle("waves")
    assert say_model(fig2, "occupancy model")._suptitle.get_text() == "occupancy model: waves"


def test_run_printing_captures_c_level_output():
    import ctypes

    libc = ctypes.CDLL(None)

    def noisy():
        libc.printf(b"from C %d\n\n", 7)
        libc.printf(b"again\n")

    assert run_printing(noisy).splitlines() == ["from C 7", "again"]


def test_same_tiles_says_when_a_wave_map_would_repeat():
    from pearl_moe.course import same_tiles
    from pearl_moe.kernels.ladder import stage_config

    decode = [make_problem("GLM 5.3", 64), make_problem("Kimi K3", 64)]
    s3, s4, s5 = (stage_config("sm_100a", s).resolved() for s in (3, 4, 5))
    text = same_tiles(s3, s4, decode)  # stage 4 keeps stage 3's 128 x 128 tile
    assert text.count("as before") == 2 and "tiles in" in text
    with pytest.raises(ValueError, match="draw the wave maps"):
        # 256 rows per expert: 64-row tiles make twice the tiles of 128-row ones
        same_tiles(s4, s5, [make_problem("GLM 5.3", 1024)])


def test_live_step_on_a_b200_is_labeled_as_the_sm100a_kernels_first_runs(monkeypatch):
    """On a Blackwell GPU the stage notebooks time stage N against N - 1 with the same
    ``time_step_live`` as on a Hopper GPU; ``live_source`` says what the numbers are."""
    from pearl_moe.bench import harness
    from pearl_moe.bench.harness import Timing
    from pearl_moe.course import live
    from pearl_moe.kernels.ladder import stage_config

    h200 = Machine("hopper", "NVIDIA H200", (9, 0))
    b200 = Machine("blackwell", "NVIDIA B200", (10, 0))
    assert live.live_source(h200) == measurement_source(None, h200) == "live on NVIDIA H200"
    label = live.live_source(b200)
    assert label.startswith("live on NVIDIA B200 (first live runs of the sm_100a kernels")
    assert "float32 reference" in label

    def fake_interleaved(impls, problem, rounds, reps):
        assert list(impls) == ["prev", "this"]
        assert [i.name for i in impls.values()] == ["pearl stage 4", "pearl stage 5"]
        prev = Timing.from_rounds([[50e-6]] * 5, 10, 1)
        this = Timing.from_rounds([[45e-6]] * 5, 10, 1)
        prev.outputs_ok = this.outputs_ok = True
        return {
            "prev": (prev, asdict(stage_config("sm_100a", 4).resolved())),
            "this": (this, asdict(stage_config("sm_100a", 5).resolved())),
        }

    monkeypatch.setattr(harness, "time_interleaved", fake_interleaved)
    row = live.time_step_live(5, make_problem("GLM 5.3", 64), floor_s=30e-6)
    assert row["this_config"].startswith("sm_100a 64x128x64") and row["verdict"] == "faster"
    line = live.format_live_step(row, 5, label)
    assert line.startswith(label + ", GLM 5.3 64 tok: stage 4 50.0 us, stage 5 45.0 us")


def test_gpu_check_summary_says_what_the_sanitizer_runs_found(tmp_path):
    """One sentence per sanitizer run for the notebooks, from the records of gpu_checks.txt; a
    failed reference check or an error count is said, and a stage no run recorded gives none."""
    from pearl_moe.course.measurements import gpu_check_summary

    committed = gpu_check_summary((3, 4))
    assert len(committed) == 1 and "memcheck" in committed[0] and ": 0 errors." in committed[0]
    assert "matched the float32 reference" in committed[0]
    folder = tmp_path / "H200"
    folder.mkdir()
    (folder / "gpu_checks.txt").write_text(
        "# compute-sanitizer --tool memcheck python3 scripts/memcheck_kernels.py\n"
        "stage 5: {'ok': False, 'err': 0.5, 'torch_err': 0.001, 'unwritten': 3}\n"
        "========= ERROR SUMMARY: 2 errors\n"
    )
    (line,) = gpu_check_summary(5, root=tmp_path)
    assert "stage 5: 2 errors." in line and "did NOT match" in line and "3 rows left" in line
    assert gpu_check_summary(6, root=tmp_path) == []
    assert gpu_check_summary(5, root=tmp_path / "nowhere") == []


def test_recorded_impl_names_print_with_current_field_names():
    from pearl_moe.course.measurements import current_names

    assert current_names("pearl-s3:tile_m=64+stages=7") == "pearl-s3:tile_m=64+ring_depth=7"
    assert current_names("raised to pearl-s5:acc_stages=2 on x") == (
        "raised to pearl-s5:acc_buffers=2 on x"
    )
    assert current_names("stages of the course") == "stages of the course"  # a word, not a field


def test_describe_run_says_the_clock_was_idle_in_a_few_words():
    """The committed compare run recorded its clock before any GPU work: the line says so briefly."""
    from pearl_moe.course.measurements import describe_run, load_kernel_results

    text = describe_run(load_kernel_results(kind="compare"))
    assert "idle clock at start: SM 345 MHz (max 1980)" in text
    assert "not the clock the kernels ran at" not in text

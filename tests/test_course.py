"""The notebooks' helpers: machine detection, source display, replayed results, store emulation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pearl_moe import course
from pearl_moe.course import (
    Machine,
    baseline,
    correctness_summary,
    detect_machine,
    diff_stats,
    families_table,
    get_source,
    kernel_rows,
    load_kernel_results,
    measurement_source,
    plot_latency_bars,
    plot_stage_sweep,
    sass_by_kernel,
    show_diff,
    show_pair,
    show_source,
    simulate_tile_stores,
    source_diff,
    stage_series,
    stage_sweep,
)
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
    code, where = get_source("pearl_moe.kernels.sm100.stage1_gemm:GemmKernel.mma_k_loop")
    assert code.startswith("@cute.jit\ndef mma_k_loop(")
    assert where.startswith("pearl_moe/kernels/sm100/stage1_gemm.py:")
    assert ("cutlass" in sys.modules) == had


def test_source_method_argument_and_objects():
    a, _ = get_source("pearl_moe.kernels.sm90.common:Sm90KernelBase", "_epilogue")
    assert "def _epilogue(" in a
    from pearl_moe.budget import smem_budget

    code, where = get_source(smem_budget)
    assert code.startswith("def smem_budget(") and where.startswith("pearl_moe/budget.py:")


def test_missing_source_raises_lookup_error():
    with pytest.raises(LookupError, match="inherited"):
        get_source("pearl_moe.kernels.sm100.stage2_grouped:GroupedGemmKernel.mma_k_loop")


def test_views_render_html_and_text():
    one = show_source("pearl_moe.kernels.scheduler:seek", title="seek")
    assert "def seek(" in repr(one) and "seek" in one._repr_html_()
    pair = show_pair("pearl_moe.kernels.scheduler:seek", "pearl_moe.kernels.scheduler:decode")
    html = pair._repr_html_()
    assert "Blackwell (sm_100a)" in html and "Hopper (sm_90a)" in html
    assert len(pair.panels) == 2


def test_diff_between_stages():
    old = "pearl_moe.kernels.sm90.stage1_gemm:Sm90DenseGemm.kernel"
    new = "pearl_moe.kernels.sm90.stage2_grouped:Sm90GroupedGemm.kernel"
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
    from pearl_moe.inspect import count_families

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
def _kernels_file(tmp_path: Path) -> Path:
    data = {
        "env": {"gpu": "NVIDIA H200", "date": "2026-11-29T15:00:00+00:00"},
        "method": "CUDA graph replay of one call, median of 30, us",
        "rows": [
            {"model": "GLM 5.3", "tokens": 64, "rows": 512, "floor_us": 381.0,
             "stage1_us": 900.0, "stage2_us": 500.0, "stage3_us": 450.0,
             "stage1_ok": True, "stage2_ok": True, "stage3_ok": False,
             "torch_grouped_mm_us": 535.0},
            {"model": "GLM 5.3", "tokens": 16, "rows": 128, "floor_us": 380.0,
             "stage1_us": 800.0, "stage2_us": 470.0, "stage3_us": 440.0,
             "stage1_ok": True, "stage2_ok": True, "stage3_ok": True,
             "torch_grouped_mm_us": None},
        ],
        "stage_sweep_glm_64": {
            "floor_us": 381.0,
            "rows": [{"tile_m": 128, "tile_n": 128, "tile_k": 64, "stages": s, "us": 500.0 - s}
                     for s in (2, 3)] + [{"tile_m": 64, "tile_n": 128, "tile_k": 64, "stages": 2,
                                         "us": 490.0}],
        },
    }  # fmt: skip
    path = tmp_path / "H200" / "kernels_sm90.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path


def test_replay_of_kernel_results(tmp_path):
    path = _kernels_file(tmp_path)
    data = load_kernel_results(path)
    assert data["_path"] == str(path)
    src = measurement_source(data)
    assert src.startswith("replayed from") and "2026-11-29" in src and "H200" in src
    assert [r["tokens"] for r in kernel_rows(data, "GLM 5.3")] == [64, 16]
    assert stage_series(data, "GLM 5.3", "stage2_us") == [(16, 470e-6), (64, 500e-6)]
    assert stage_series(data, "GLM 5.3", "torch_grouped_mm_us") == [(64, 535e-6)]
    lines = correctness_summary(data, stages=(1, 3))
    assert "stage 3: FAIL" in lines[0] and "stage 3: pass" in lines[1]
    assert [r["stages"] for r in stage_sweep(data, 128)] == [2, 3]
    assert len(stage_sweep(data)) == 3


def test_missing_results_say_so(tmp_path):
    missing = tmp_path / "nope.json"
    assert load_kernel_results(missing) is None
    assert measurement_source(None, expected=missing).startswith("no recorded measurement yet")
    assert kernel_rows(None) == [] and stage_series(None, "GLM 5.3", "stage1_us") == []
    assert stage_sweep(None) == [] and correctness_summary(None) == []
    live = Machine("hopper", "NVIDIA H200", (9, 0))
    assert measurement_source(None, live) == "live on NVIDIA H200"


def test_baseline_replay_from_bench_records(tmp_path):
    from pearl_moe.bench.records import new_run, problem_entry, write_run

    problem = make_problem("GLM 5.3", 64)
    ceilings = {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}
    run = new_run(
        "baselines", {"gpu": "NVIDIA H200", "date": "2026-11-29T13:55:37+00:00"}, ceilings
    )
    entry = problem_entry(problem, ceilings)
    run["problems"].append(entry)
    run["records"].append(
        {
            "problem": entry["id"],
            "impl": "loop",
            "status": "ok",
            "config": {},
            "time": {"median_us": 560.0},
            "metrics": {"floor_us": entry["floor_us"], "pct_of_floor": 70.0},
            "correctness": {"ok": True},
        }
    )
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
        measured_label="replayed from results/H200/kernels_sm90.json",
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
@pytest.mark.parametrize("name", ["02_plain_gemm", "03_grouped_gemm", "04_bytes_in_flight"])
def test_stage_notebooks_define_no_kernel_and_label_b200_as_modeled(name):
    import nbformat

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "@cute.kernel" not in code and "@cute.jit" not in code and "import cutlass" not in code
    assert "detect_machine()" in code
    assert "compile-verified on CPU and run only on a real B200" in text
    assert "modeled" in text

import re
import shutil
from pathlib import Path

import pytest

from pearl_moe.course.doc_tables import (
    STAGES,
    measured_steps,
    render_compare_table,
    render_speed_table,
    render_stage_table,
    update_readme,
)
from pearl_moe.results import read_run

ROOT = Path(__file__).resolve().parent.parent


def test_readme_stage_table_is_up_to_date():
    readme = (ROOT / "README.md").read_text()
    assert render_stage_table() in readme, "run `python -m pearl_moe figures` to refresh README"


def test_stage_table_links_every_notebook_and_says_where_it_runs():
    table = render_stage_table()
    assert [s.notebook for s in STAGES] == sorted(
        p.stem for p in (ROOT / "notebooks").glob("*.ipynb")
    )
    for stage in STAGES:
        row = next(line for line in table.splitlines() if line.startswith(f"| {stage.label} |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == f"[{stage.title}](notebooks/{stage.notebook}.ipynb)"
        assert cells[3].startswith("CPU") and cells[4] == str(stage.minutes)
        assert stage.minutes <= 75  # one sitting


def test_update_readme_rewrites_only_the_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        "intro\n<!-- stages:begin -->\nstale\n<!-- stages:end -->\n"
        "<!-- compare:begin -->\n<!-- compare:end -->\n"
        "<!-- general:begin -->\n<!-- general:end -->\n"
        "<!-- general-h100:begin -->\n<!-- general-h100:end -->\n"
        "<!-- layer:begin -->\n<!-- layer:end -->\n"
        "<!-- speed:begin -->\n<!-- speed:end -->\noutro\n"
    )
    assert update_readme(readme) is True
    text = readme.read_text()
    assert "stale" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    assert update_readme(readme) is False  # idempotent


def test_readme_speed_table_is_up_to_date():
    assert render_speed_table() in (ROOT / "README.md").read_text()


def test_speed_table_reads_the_recorded_stages_run():
    table = render_speed_table()
    assert "results/H200/stages.json.gz" in table
    row = next(line for line in table.splitlines() if line.startswith("| stage 3"))
    assert row.count("%") == 4  # every problem of the table was measured


def test_speed_table_says_when_nothing_was_recorded(tmp_path):
    assert "No `stages` run recorded" in render_speed_table(results_root=tmp_path)


def test_stage_table_shows_the_measured_step_of_stages_4_to_7():
    steps = measured_steps()
    if not {4, 5, 6, 7} <= set(steps):
        pytest.skip("no ablation of stages 4-7 committed")
    table = render_stage_table()
    first = {}
    for stage in STAGES:
        first.setdefault(stage.taught_stage, stage)
    for stage in first.values():
        if stage.taught_stage in (4, 5, 6, 7):
            row = next(line for line in table.splitlines() if line.startswith(f"| {stage.label} |"))
            step = steps[stage.taught_stage]
            assert step["kind"] == "ablation" and step["method"] == "paired per round"
            assert f"decode ×{step['decode']['geomean']:.2f}" in row
            assert f"prefill ×{step['prefill']['geomean']:.2f}" in row
    assert "results/H200/ablation.json.gz" in table


def test_readme_compare_table_is_up_to_date():
    assert render_compare_table() in (ROOT / "README.md").read_text()


def test_compare_table_shows_the_default_call_against_every_baseline():
    run = read_run(ROOT / "results" / "H200" / "compare.json.gz")
    table = render_compare_table()
    head = next(line for line in table.splitlines() if line.startswith("| model |"))
    baselines = {r["impl"] for r in run["records"]} - {"pearl"}
    assert len(head.split("|")) - 2 == 7 + len(baselines)  # a column per baseline
    shapes = [line for line in table.splitlines() if re.match(r"\| (GLM|DeepSeek|Kimi)", line)]
    assert len(shapes) == len(run["problems"])
    assert "geomean ratio" in table and "above 1.03" in table
    assert "datasheet's 4.8 TB/s" in table and "faster than quack-tuned" in table
    assert re.search(r"Tile scheduler of this run: (serial|warp-parallel) walk", table)


def test_compare_table_says_when_nothing_was_recorded(tmp_path):
    assert "No `compare` run recorded" in render_compare_table(results_root=tmp_path)
    (tmp_path / "H200").mkdir()
    shutil.copy(ROOT / "results" / "H200" / "compare.json.gz", tmp_path / "H200")
    assert "geomean ratio" in render_compare_table(results_root=tmp_path)


def test_readme_layer_table_is_up_to_date():
    from pearl_moe.course.doc_tables import render_layer_table

    assert render_layer_table() in (ROOT / "README.md").read_text()

from pathlib import Path

from pearl_moe.stages import STAGES, render_speed_table, render_stage_table, update_readme

ROOT = Path(__file__).resolve().parent.parent


def test_readme_stage_table_is_up_to_date():
    readme = (ROOT / "README.md").read_text()
    assert render_stage_table() in readme, "run `python -m pearl_moe figures` to refresh README"


def test_stage_table_marks_what_exists():
    table = render_stage_table()
    for stage in STAGES:
        row = next(line for line in table.splitlines() if line.startswith(f"| {stage.label} |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[3] == ("yes" if stage.has_notebook() else "-")
        assert (f"(notebooks/{stage.notebook}.ipynb)" in row) == stage.has_notebook()


def test_update_readme_rewrites_only_the_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        "intro\n<!-- stages:begin -->\nstale\n<!-- stages:end -->\n"
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
    assert "results/H200/stages.json" in table
    row = next(line for line in table.splitlines() if line.startswith("| stage 3"))
    assert row.count("%") == 4  # every problem of the table was measured


def test_speed_table_says_when_nothing_was_recorded(tmp_path):
    assert "No `stages` run recorded" in render_speed_table(results_root=tmp_path)

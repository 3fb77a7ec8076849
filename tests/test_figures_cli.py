"""``python -m pearl_moe figures`` writes every registered figure, small, into the chosen folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pearl_moe.course import figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_BYTES = 150 * 1024


def test_main_writes_every_figure(tmp_path, capsys):
    assert figures.main(["--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    expected = sorted(f"{name}.png" for name in figures.registry() if name in figures.FIGURES)
    assert set(expected) <= set(written)
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC
        assert len(data) < MAX_BYTES, f"{path.name} is {len(data)} bytes"
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < 1024 * 1024
    assert "occupancy_glm_decode.png" in capsys.readouterr().out


def test_only_selects_figures(tmp_path):
    assert figures.main(["--out", str(tmp_path), "--only", "tmem_maps"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["tmem_maps.png"]


def test_unknown_figure_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        figures.main(["--out", str(tmp_path), "--only", "no_such_figure"])
    assert exit_info.value.code == 2
    assert "no_such_figure" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_list_names_the_registry(capsys):
    assert figures.main(["--list"]) == 0
    assert capsys.readouterr().out.split() == list(figures.registry())


def test_registry_holds_the_course_and_the_bench_figures():
    """One registry: the course's figures, then the benchmark's, each name once."""
    merged = figures.registry()
    assert list(merged) == [*figures.COURSE_FIGURES, *figures.BENCH_FIGURES]
    assert {"tmem_maps", "bench_compare_h200", "ablation_h200"} <= set(merged)
    with pytest.raises(ValueError, match="registered twice"):
        figures._merge(figures.COURSE_FIGURES, {"tmem_maps": lambda out: []})


def test_committed_figures_exist_and_are_small():
    """Every figure of this module has a committed PNG in figures/ under the size limit."""
    repo_figures = Path(figures.__file__).resolve().parents[2] / "figures"
    for name in figures.FIGURES:
        path = repo_figures / f"{name}.png"
        assert path.exists(), f"run `python -m pearl_moe figures` to create {path.name}"
        assert path.stat().st_size < MAX_BYTES


def test_module_cli_entry_point(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pearl_moe",
            "figures",
            "--out",
            str(tmp_path),
            "--only",
            "smem_budget_blog_configs",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "smem_budget_blog_configs.png").exists()


def test_figures_page_lists_existing_figures(tmp_path):
    """The figure list of docs/figures.md: each drawn figure, linked from the page's folder."""
    fig_dir = tmp_path / "figures"
    assert figures.main(["--out", str(fig_dir), "--only", "tmem_maps"]) == 0
    page = tmp_path / "docs" / "figures.md"
    page.parent.mkdir()
    page.write_text("intro\n<!-- figures:begin -->\nstale\n<!-- figures:end -->\noutro\n")
    assert figures.update_figures_page(page, figures.FIGURES, fig_dir) is True
    text = page.read_text()
    assert "stale" not in text and "![tmem_maps](../figures/tmem_maps.png)" in text
    assert "occupancy_glm_decode" not in text  # not drawn, so not listed
    assert figures.update_figures_page(page, figures.FIGURES, fig_dir) is False
    page.write_text("no block here\n")
    with pytest.raises(ValueError, match="figures:begin"):
        figures.update_figures_page(page, figures.FIGURES, fig_dir)


def test_the_committed_figures_page_is_up_to_date():
    repo = Path(figures.__file__).resolve().parents[2]
    page = repo / figures.FIGURES_PAGE
    expected = figures.render_figures_block(figures.FIGURES, repo / "figures", page.parent)
    assert f"<!-- figures:begin -->\n{expected}<!-- figures:end -->" in page.read_text(), (
        "docs/figures.md is stale: run `python -m pearl_moe figures`"
    )


def test_writing_elsewhere_leaves_the_readme_alone(tmp_path, capsys):
    assert figures.main(["--out", str(tmp_path), "--only", "tmem_maps"]) == 0
    assert "README" not in capsys.readouterr().out

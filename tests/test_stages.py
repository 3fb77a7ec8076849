import re
import shutil
from pathlib import Path

import pytest

from pearl_moe.course.doc_tables import (
    DOC_BLOCKS,
    STAGES,
    block_text,
    measured_steps,
    render_compare_table,
    render_headline_table,
    render_options_table,
    render_speed_table,
    render_stage_table,
    render_steps_table,
    update_doc,
    update_docs,
)
from pearl_moe.results import read_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("page", "name"),
    [(page, name) for page, blocks in DOC_BLOCKS.items() for name in blocks],
    ids=[f"{page}:{name}" for page, blocks in DOC_BLOCKS.items() for name in blocks],
)
def test_generated_block_is_up_to_date(page, name):
    """Every generated block of the README and docs/ is what its renderer gives now."""
    body = block_text((ROOT / page).read_text(), name)
    assert body is not None, f"{page} lacks its <!-- {name}:begin --> ... <!-- {name}:end --> block"
    assert body == DOC_BLOCKS[page][name]() + "\n", (
        f"{page}'s {name} block is stale: run `python -m pearl_moe figures`"
    )


def test_stage_table_links_every_notebook_and_says_where_it_runs():
    """The course map (STAGES) and notebooks/ hold the same notebooks; each row links its notebook,
    says where it runs and fits one sitting."""
    table = render_stage_table()
    on_disk = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    mapped = [s.notebook for s in STAGES]
    assert mapped == sorted(mapped), "STAGES must list the notebooks in file order"
    assert not on_disk - set(mapped), (
        f"notebooks missing from STAGES: {sorted(on_disk - set(mapped))}"
    )
    assert not set(mapped) - on_disk, (
        f"STAGES names notebooks not in notebooks/: {sorted(set(mapped) - on_disk)}"
    )
    for stage in STAGES:
        row = next(line for line in table.splitlines() if line.startswith(f"| {stage.label} |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == f"[{stage.title}](notebooks/{stage.notebook}.ipynb)", stage.notebook
        assert cells[3].startswith("CPU") and cells[4] == str(stage.minutes), stage.notebook
        assert stage.minutes <= 75, (
            f"{stage.notebook}: {stage.minutes} min is more than one sitting"
        )


def test_stage_table_links_only_notebooks_that_exist(tmp_path, monkeypatch):
    """A notebook not yet written is named, not linked (a negative case of the test above)."""
    from pearl_moe.course import doc_tables

    monkeypatch.setattr(doc_tables, "ROOT", tmp_path)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / f"{STAGES[0].notebook}.ipynb").write_text("{}")
    rows = [
        line for line in render_stage_table(ROOT / "results").splitlines() if line.startswith("| 0")
    ]
    assert f"(notebooks/{STAGES[0].notebook}.ipynb)" in rows[0]
    assert "](notebooks/" not in rows[1]


def test_update_docs_rewrites_only_the_blocks_of_each_page(tmp_path):
    for page, blocks in DOC_BLOCKS.items():
        path = tmp_path / page
        path.parent.mkdir(parents=True, exist_ok=True)
        markers = "".join(f"<!-- {name}:begin -->\nstale\n<!-- {name}:end -->\n" for name in blocks)
        path.write_text("intro\n" + markers + "outro\n")
    changed = update_docs(tmp_path)
    assert sorted(changed) == sorted(tmp_path / page for page in DOC_BLOCKS)
    for page in DOC_BLOCKS:
        text = (tmp_path / page).read_text()
        assert "stale" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    assert update_docs(tmp_path) == []  # idempotent


def test_a_page_without_its_block_is_an_error(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("intro\n<!-- stages:begin -->\n<!-- stages:end -->\n")
    with pytest.raises(ValueError, match="headline"):
        update_doc(page, DOC_BLOCKS["README.md"])


def test_speed_table_reads_the_recorded_stages_run():
    table = render_speed_table()
    assert "results/H200/stages.json.gz" in table
    row = next(line for line in table.splitlines() if line.startswith("| stage 3"))
    assert row.count("%") == 4  # every problem of the table was measured


def test_speed_table_says_when_nothing_was_recorded(tmp_path):
    assert "No `stages` run recorded" in render_speed_table(results_root=tmp_path)


def test_stage_table_shows_the_measured_step_of_stages_4_to_7():
    """Each measured step once, short (decode · prefill), on the stage's first notebook that runs
    on Hopper (the steps were measured with the sm_90a kernels): stage 7's on 07b, not on the
    Blackwell notebook. The ranges, shapes and runs are in docs/performance.md's steps block, which
    the table links."""
    steps = measured_steps()
    if not {4, 5, 6, 7} <= set(steps):
        pytest.skip("no ablation of stages 4-7 committed")
    table = render_stage_table()
    first = {}
    for stage in STAGES:
        if "Hopper" in stage.runs_on:
            first.setdefault(stage.taught_stage, stage)
    for stage in STAGES:
        if stage.taught_stage not in (4, 5, 6, 7):
            continue
        row = next(line for line in table.splitlines() if line.startswith(f"| {stage.label} |"))
        step = steps[stage.taught_stage]
        cell = f"| ×{step['decode']['geomean']:.2f} · ×{step['prefill']['geomean']:.2f} |"
        if stage is not first[stage.taught_stage]:
            assert cell not in row and row.endswith("| - |"), (
                f"{stage.label} repeats stage {stage.taught_stage}'s step"
            )
            continue
        assert step["kind"] == "ablation" and step["method"] == "paired per round"
        assert row.endswith(cell), row
    assert "](docs/performance.md#each-kernel-stage-against-the-one-before)" in table
    assert len(table.split("\n\n", 1)[1].split()) < 40, "the course map's note stays short"


def test_steps_block_has_each_step_with_its_range_and_run():
    """docs/performance.md's steps block: every measured step with its decode and prefill range
    and the run it comes from (the long form of the course map's column)."""
    steps = measured_steps()
    table = render_steps_table()
    for n, step in steps.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {n} / {n - 1} |"))
        q = step["decode"]
        assert f"×{q['geomean']:.2f} ({q['lo']:.2f}-{q['hi']:.2f})" in row
        assert f"`{step['kind']}.json" in row
    if {4, 5, 6, 7} <= set(steps):
        assert "results/H200/ablation.json.gz" in table and "paired per round" in table
    assert "No `stages` or `ablation` run" in render_steps_table(ROOT / "no-such-folder")


def test_headline_is_plain_words_from_one_run():
    """The README's speed table: no configuration codes, the course's and the held-out layers from
    one run, ratios that agree with that run's summary."""
    from pearl_moe.bench.compare import compare_summary, geomean

    table = render_headline_table()
    assert "results/H200/compare_general.json.gz" in table
    assert not re.search(r"sm_\d+a|\d+x\d+x\d+|\br\d+\b|shiftA|pingpong|\bB2\b", table)
    s = compare_summary(read_run(ROOT / "results" / "H200" / "compare_general.json.gz"))
    held = [r["ratio"] for r in s["rows"] if r["set"] == "held-out" and r["tokens"] == 4096]
    row = next(line for line in table.splitlines() if "no one tuned" in line and "4096" in line)
    assert f"| {geomean(held):.2f} ({max(held):.2f}) |" in row
    assert row.split("|")[3].strip() == str(len(held))
    assert "No `compare` run" in render_headline_table(results_root=ROOT / "no-such-folder")


def test_headline_says_how_it_relates_to_the_course_run():
    """The headline's run is not the one notebook 08a teaches: the block names that run and gives
    its course geomeans, so the two sets of numbers for the same shapes are not read as one."""
    from pearl_moe.bench.compare import compare_summary, geomean

    table = render_headline_table()
    s = compare_summary(read_run(ROOT / "results" / "H200" / "compare.json.gz"))
    ratios = [r["ratio"] for r in s["rows"] if "ratio" in r]
    note = next(line for line in table.splitlines() if line.startswith("Notebook 08a"))
    assert "`results/H200/compare.json.gz`" in note
    assert f"ratio {geomean(ratios):.2f} ({max(ratios):.2f}) over them all" in note
    assert "times move between runs" in note


def test_options_table_counts_the_committed_tables():
    import json

    table = render_options_table()
    h200 = json.loads((ROOT / "pearl_moe" / "tuning" / "H200.json").read_text())["entries"]
    split = sum(1 for e in h200 if e["config"].get("acc_slots") == 2)
    row = next(line for line in table.splitlines() if "`pingpong`" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert int(cells[2]) + int(cells[3]) == split
    decode = sum(1 for e in h200 if int(re.search(r"(\d+) tokens", e["measured_at"])[1]) <= 256)
    assert f"H200: decode ({decode}) | H200: 512 tokens and more ({len(h200) - decode}) |" in table
    fake = {"X": {"entries": [{"measured_at": "M 16 tokens (EP8, balanced)",
                               "config": {"tile_m": 8, "epilogue": "direct_store", "swap_ab": True}}]}}  # fmt: skip
    row = next(line for line in render_options_table(fake).splitlines() if "`swapAB`" in line)
    assert row.endswith("| 1 | 0 |")


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


def test_ceilings_table_has_every_committed_run():
    from pearl_moe.course.doc_tables import render_ceilings_table
    from pearl_moe.results import list_runs

    table = render_ceilings_table()
    rows = [line for line in table.splitlines() if line.startswith("| H")]
    assert len(rows) == len(list_runs())
    assert "| the probes |" in table and "stages=" not in table  # current field names
    assert "No run committed" in render_ceilings_table(ROOT / "no-such-folder")

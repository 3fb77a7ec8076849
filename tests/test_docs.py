"""The README as a front door and the reference pages of docs/: short, first things first, every
link resolving, no run history, the README's commands the ones CI runs, its code importable.

The generated blocks of these pages are checked in ``test_stages.py`` (every block up to date) and
``test_figures_cli.py`` (the figure list)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from course_text import broken_links, history_hits

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: The reference pages the README sends a reader to.
DOC_PAGES = ("performance", "tuning", "moe_layer", "development", "figures")
MAX_README_LINES = 200


def _pages() -> list[Path]:
    return [README, *DOCS]


def test_the_readme_fits_one_screen_of_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines, at most {MAX_README_LINES}: move detail to docs/"
    )


def test_the_readme_says_what_runs_where_first():
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[0] == "What runs where", f"the README's first section is {sections[0]!r}"
    where = text.split("## What runs where", 1)[1].split("\n## ", 1)[0]
    flat = " ".join(where.split())
    for said in (
        "| CPU only |",
        "| Hopper GPU",
        "| Blackwell GPU",
        "Blackwell kernels are compile-verified and reviewed here and run only on a real B200",
        "labeled *modeled*",
        "(docs/first_run_b200.md)",
    ):
        assert said in flat, f"the README's 'What runs where' lacks {said!r}"


def test_the_readme_has_the_commands_ci_runs():
    """.ci/run installs and tests "exactly as the README says": the README's two commands, verbatim."""
    text = README.read_text()
    block = text.split("## Set up and test", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ['pip install -e ".[course,dev]"', "pytest"], commands
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert 'python -m pip install -e ".[course,dev]"' in ci and "pytest" in ci


def test_the_readme_links_every_reference_page_and_they_exist():
    text = README.read_text()
    for page in DOC_PAGES:
        assert (ROOT / "docs" / f"{page}.md").is_file(), f"docs/{page}.md is missing"
        assert f"(docs/{page}.md)" in text, f"the README does not link docs/{page}.md"


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    broken = broken_links(path.read_text(), path.parent, ROOT)
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_relative_link_of_a_notebook_resolves(path):
    """Links between notebooks (with their section anchors), to figures, sources and docs."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    broken = broken_links(text, path.parent, ROOT)
    assert not broken, f"{path.name}: broken links {broken}"


def test_every_relative_link_of_the_studies_index_resolves():
    """experiments/README.md: its "cited by" column links the notebooks and pages that cite each
    study."""
    path = ROOT / "experiments" / "README.md"
    broken = broken_links(path.read_text(), path.parent, ROOT)
    assert not broken, f"experiments/README.md: broken links {broken}"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# A heading\n")
    text = "[ok](there.md) [ok](there.md#a-heading) [no](missing.md) [no](there.md#nope) `[x](y)`"
    assert broken_links(text, tmp_path, tmp_path) == [
        "missing.md (no such file)",
        "there.md#nope (no heading #nope)",
    ]


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_run_history(path):
    """What is true and why, never how it was found: no "went from", "not yet", commit hash or
    date in the prose (a generated block may carry its run's date as data)."""
    hits = history_hits(path.read_text())
    assert not hits, (
        f"{path.relative_to(ROOT)}: run history {hits}; state the fact and cite the study's row "
        "in experiments/README.md"
    )


def test_history_is_found():
    text = (
        "It went from 1.17 to 1.03, not yet timed (commit 7826cfa, 2026-12-01).\n"
        "<!-- compare:begin -->\nMeasured 2026-12-01; picks changed since this run\n"
        "<!-- compare:end -->\nThe table is used to pick; `git show` in code is fine."
    )
    assert history_hits(text) == ["went from", "not yet", "commit hash 7826cfa", "date 2026-12-01"]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_code_shown_parses_and_its_imports_exist(path):
    """The README's and docs' Python parses, and every name it imports from the package exists."""
    import importlib

    for code in _python_blocks(path.read_text()):
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pearl_moe"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{path.name}: {node.module}.{alias.name}"


def test_the_readme_config_example_is_a_valid_config():
    from pearl_moe import GemmConfig

    line = next(ln for ln in README.read_text().splitlines() if ln.startswith("cfg = GemmConfig("))
    call = ast.parse(line.split("=", 1)[1].strip()).body[0].value
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    GemmConfig(**kwargs)  # raises ValueError with the reason where the hardware cannot run it


def test_the_configuration_codes_are_explained():
    """Every code the tuned tables' picks print (``GemmConfig.describe``) has a row in
    docs/tuning.md's legend, with digits as the legend writes them (``rN``, ``MxNxK``)."""
    text = (ROOT / "docs" / "tuning.md").read_text()
    legend = text.split("## Configuration codes", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"`(sm_90a [^`]+)` \(an entry of the H200 table\)", legend)
    h200 = json.loads((ROOT / "pearl_moe" / "tuning" / "H200.json").read_text())["entries"]
    assert example and example[1] in {e["label"] for e in h200}, "the legend's example is no entry"
    codes = set()
    for row in legend.splitlines():
        if row.startswith("| `"):
            codes |= set(re.findall(r"`([^`]+)`", row.split("|")[1]))
    generic = (
        (r"\d+x\d+x\d+", "MxNxK"),
        (r"r\d+", "rN"),
        (r"ng\d+", "ngN"),
        (r"acc\d+", "accN"),
        (r"direct\d+", "directN"),
    )
    for gpu in ("H200", "H100"):
        table = json.loads((ROOT / "pearl_moe" / "tuning" / f"{gpu}.json").read_text())
        for entry in table["entries"]:
            for token in entry["label"].split():
                for pattern, name in generic:
                    if re.fullmatch(pattern, token):
                        token = name
                assert token in codes, f"docs/tuning.md's legend lacks {token!r} ({gpu} table)"


def test_the_layer_page_quotes_the_glue_steps_of_the_committed_run():
    """docs/moe_layer.md's step times of the routing metadata and the combine (GLM 5.3 at 1, 64
    and 4096 tokens) are the committed layer run's."""
    from pearl_moe.bench.layer import load_layer_run

    run = load_layer_run("H200")
    us = {
        (r["problem"].split("|")[2], r["impl"]): r["time"]["median_us"]
        for r in run["records"]
        if r["problem"].startswith("GLM 5.3|") and r["impl"] in ("step:metadata", "step:combine")
        and r.get("time")
    }  # fmt: skip
    text = " ".join((ROOT / "docs" / "moe_layer.md").read_text().split())
    for tokens in ("1", "64", "4096"):
        pair = f"{us[(tokens, 'step:metadata')]:.1f} and {us[(tokens, 'step:combine')]:.1f} µs"
        if tokens == "1":
            pair = (
                f"{us[(tokens, 'step:metadata')]:.1f} µs on the metadata and "
                f"{us[(tokens, 'step:combine')]:.1f} µs on the combine"
            )
        assert pair in text, f"docs/moe_layer.md should quote {pair!r} at {tokens} tokens"


def test_the_development_page_lists_every_generated_block():
    from pearl_moe.course.doc_tables import DOC_BLOCKS

    text = (ROOT / "docs" / "development.md").read_text()
    for page, blocks in DOC_BLOCKS.items():
        row = next((ln for ln in text.splitlines() if ln.startswith(f"| [{page}]")), None)
        assert row is not None, f"docs/development.md's table of blocks lacks {page}"
        listed = set(re.findall(r"`([\w-]+)`", row.split("|")[2]))
        assert listed == set(blocks), (
            f"docs/development.md lists {listed} for {page}, not {set(blocks)}"
        )

"""Write-it-yourself exercises: every solution passes its checker, every notebook starter fails it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pearl_moe.course.exercises import (
    EXERCISES,
    Check,
    Exercise,
    ExerciseResult,
    check_exercise,
    compile_solution,
    solution_path,
)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def starter_source(ex: Exercise) -> str:
    """The notebook's starter cell (id ``exercise-<key>``) without its ``%%cute_compile`` line."""
    nb = json.loads((NOTEBOOKS / f"{ex.notebook}.ipynb").read_text())
    cells = [c for c in nb["cells"] if c.get("id") == f"exercise-{ex.key}"]
    assert len(cells) == 1, (
        f"{ex.notebook}.ipynb needs one starter cell with id 'exercise-{ex.key}' "
        f"(found {len(cells)})"
    )
    lines = "".join(cells[0]["source"]).splitlines(keepends=True)
    assert lines and lines[0].startswith("%%cute_compile"), (
        f"{ex.notebook}.ipynb: the starter of {ex.key} must start with %%cute_compile"
    )
    return "".join(lines[1:])


def test_the_checker_reports_each_check_and_target_and_never_raises():
    class Report:
        families = {"UTMALDG (TMA load)": 2}
        smem_bytes = 1024

    ex = Exercise(
        "xx-demo",
        "01a_stage1_kernel",
        "demo",
        (
            Check("two TMA loads", lambda r: r.families["UTMALDG (TMA load)"] == 2),
            Check("a key the report lacks", lambda r: r.families["missing"] > 0, ("sm_90a",)),
        ),
    )
    EXERCISES[ex.key] = ex
    try:
        got = check_exercise(ex.key, {"sm_100a": Report(), "sm_90a": Report()}, out=None)
        assert isinstance(got, ExerciseResult) and not got.ok
        assert [ok for ok, _ in got.lines] == [True, True, False]
        assert "KeyError" in got.lines[-1][1]
        only = check_exercise(ex.key, {"sm_100a": Report()}, out=None)
        assert "not compiled for sm_90a" in only.lines[1][1]
    finally:
        del EXERCISES[ex.key]


def test_every_exercise_has_a_solution_file_and_a_starter_cell():
    assert EXERCISES, "no exercise registered"
    for ex in EXERCISES.values():
        assert solution_path(ex.key).is_file(), ex.key
        assert (NOTEBOOKS / f"{ex.notebook}.ipynb").is_file(), ex.notebook
        starter = starter_source(ex)
        assert "def host" in starter and "def example_args" in starter, (
            f"{ex.notebook}.ipynb: the starter of {ex.key} lacks def host / def example_args"
        )


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_solution_passes_and_starter_fails(key):
    from pearl_moe.course.scratch import compile_scratch

    ex = EXERCISES[key]
    solved = check_exercise(key, compile_solution(key), out=None)
    assert solved.ok, repr(solved)
    starter = check_exercise(key, compile_scratch(starter_source(ex), ex.archs), out=None)
    assert not starter.ok, f"the starter of {key} already passes its checker"

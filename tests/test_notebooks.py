"""Every notebook runs top to bottom headlessly, prints what its ``# Expected output`` blocks say,
and is committed without outputs; and each keeps the course's contracts (first cell, length, no run
history, the one-line "where this runs", the parts of a stage notebook).

Notebooks are found by glob, so a new notebook is tested as soon as it lands in ``notebooks/``. Which
notebook teaches which kernel stage comes from the course map, ``doc_tables.STAGES``; the checks of a
stage (its calls, its live branches) hold for the union of that stage's notebooks.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from course_text import (
    expected_blocks,
    first_cell_problems,
    history_hits,
    markdown_words,
    printed_text,
    unmatched_expected,
)

from pearl_moe.course.doc_tables import STAGES

# The GPU machine runs `pytest -m gpu` without Jupyter installed; everywhere the README's install
# ran, nbformat and nbclient are there (the dev extra) and these tests run.
nbformat = pytest.importorskip("nbformat", reason="notebook tests need the dev extra (nbformat)")

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 600


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOKS_DIR}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_headless(path: Path):
    """Every cell runs on a CPU, and every ``# Expected output`` block of a code cell matches what
    that cell printed (whitespace-normalized, ``...`` a wildcard, lines in order): the numbers a
    reader sees without running are the ones the notebook computes. One run serves both checks."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not errors
    wrong = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        printed = printed_text(cell.outputs)
        for block in expected_blocks(cell.source):
            missing = unmatched_expected(block, printed)
            if missing is not None:
                shown = "\n    ".join(printed.strip().splitlines()[:12]) or "(nothing)"
                wrong.append(f"cell {i}: expected {missing!r}; it printed:\n    {shown}")
    assert not wrong, f"{path.name}: expected output differs from the CPU run:\n" + "\n".join(wrong)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; strip them"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_first_cell_says_what_you_learn_where_it_runs_and_how_long(path: Path):
    """An H1 title, then **You'll learn:**, **Runs on:** (CPU first), **Assumes:** and **Time:**
    ~NN min, each on its own line; the time and the machines agree with the course map."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0] if nb.cells else None
    assert first is not None and first.cell_type == "markdown", (
        f"{path.name}: the first cell must be markdown"
    )
    row = COURSE_MAP.get(path.stem)
    problems = first_cell_problems(
        first.source, row.minutes if row else None, row.runs_on if row else None
    )
    assert not problems, f"{path.name}, first cell: " + "; ".join(problems)


def test_a_first_cell_that_misses_a_lead_in_is_caught():
    good = "# 99 · T\n\n**You'll learn:** x\n\n**Runs on:** CPU (all) · Hopper (live)\n\n" \
        "**Assumes:** 00a\n\n**Time:** ~40 min"  # fmt: skip
    assert first_cell_problems(good, 40, "CPU · Hopper") == []
    assert first_cell_problems(good, 45, "CPU · Hopper · Blackwell") == [
        "'**Runs on:**' names ['CPU', 'Hopper'], the course map (doc_tables.STAGES) says "
        "'CPU · Hopper · Blackwell'",
        "'**Time:** ~40 min' but the course map (doc_tables.STAGES) says 45 min",
    ]
    assert "needs one line starting '**Assumes:**' (found 0)" in first_cell_problems(
        good.replace("**Assumes:**", "Assumes:")
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_one_sitting_of_markdown(path: Path):
    """At most 2,500 words of markdown, exercises and hidden answers included."""
    words = markdown_words(nbformat.read(path, as_version=4).cells)
    assert words <= MAX_MARKDOWN_WORDS, (
        f"{path.name}: {words} words of markdown, at most {MAX_MARKDOWN_WORDS}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_run_history_in_the_lesson(path: Path):
    """A lesson states what is true and why; how it was found (runs, dead ends, commits, dates)
    lives in experiments/README.md, cited in one sentence."""
    nb = nbformat.read(path, as_version=4)
    hits = [
        f"cell {i}: {hit}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for hit in history_hits(cell.source)
    ]
    assert not hits, f"{path.name}: run history in the markdown: {hits}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_expected_output_blocks_are_well_formed(path: Path):
    """Each ``# Expected output`` block has at least one line, and the notebook shows a reader at
    least one (the headless run compares each with what its cell prints)."""
    nb = nbformat.read(path, as_version=4)
    blocks = [
        (i, block)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for block in expected_blocks(cell.source)
    ]
    assert blocks, f"{path.name}: no '# Expected output' block: a reader sees no number"
    empty = [i for i, block in blocks if not any(line.strip() for line in block)]
    assert not empty, f"{path.name}: cells {empty} have an empty '# Expected output' block"


def test_expected_output_is_compared_line_by_line():
    printed = "H200: stage 1   1053 us (38%)\nsomething else\nB200 model: 412 us\n"
    assert unmatched_expected(["H200: stage 1 1053 us ...", "B200 model: ... us"], printed) is None
    assert unmatched_expected(["B200 model: 412 us", "H200: stage 1 ..."], printed) == (
        "H200: stage 1 ..."  # out of order
    )
    assert unmatched_expected(["H200: stage 1 1054 us ..."], printed) == "H200: stage 1 1054 us ..."
    source = "x = 1\nprint(x)\n# Expected output (CPU):\n# 1\n#\ny = 2\n"
    assert expected_blocks(source) == [["1", ""]]


WHERE_IT_RUNS = (
    "Blackwell kernels are compile-verified here and run only on a real B200; "
    "the sm_90a kernels are run, verified and measured on the H200."
)

#: Where the kernels run is said once, in notebook 00's section of that name; every notebook that
#: runs kernel stages says it in this one line and links to that section.
WHERE_THIS_RUNS = (
    "**Where this runs:** the sm_90a kernels are run, verified and measured on the H200; "
    "the sm_100a kernels are compile-verified only and have never run anywhere. "
    "On a B200 this notebook tries them live; every B200 latency here is modeled. "
    "[More in notebook 00a.](00a_setup_and_tour.ipynb#Where-the-kernels-run)"
)
WHERE_SECTION = "## Where the kernels run"

#: A sentence of the long paragraph the stage notebooks used to repeat in place of that line.
OLD_WHERE_PARAGRAPH = "stage modules implement `compile_kernel` + `launch`, so on a real B200"


#: The notebooks of each kernel stage, from the course map (``01a``/``01b`` teach stage 1, ...).
STAGE_GROUPS: dict[int, list[str]] = {}
for _s in STAGES:
    if _s.kernel_stage is not None:
        STAGE_GROUPS.setdefault(_s.kernel_stage, []).append(_s.notebook)
#: Every notebook that teaches a kernel stage (01a-07b).
KERNEL_NOTEBOOKS = [nb for group in STAGE_GROUPS.values() for nb in group]
#: The notebooks of kernel stage 3: the persistent schedule, the warp roles, the bytes in flight.
STAGE_3_NOTEBOOKS = STAGE_GROUPS[3]
#: The notebooks of kernel stages 4-7 (the post's four optimizations).
STAGE_NOTEBOOKS = [nb for stage in (4, 5, 6, 7) for nb in STAGE_GROUPS[stage]]
#: The course map's row of each notebook.
COURSE_MAP = {s.notebook: s for s in STAGES}
#: Hard limit of a notebook's markdown (the brief asks for at most 2,300 words).
MAX_MARKDOWN_WORDS = 2500


def _existing(names):
    """``names`` that are notebooks in the tree (a notebook the course map lists but no one has
    written yet is reported by test_stages, not here)."""
    return [n for n in names if (NOTEBOOKS_DIR / f"{n}.ipynb").exists()]


def _markdown(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    return " ".join(c.source.replace("\n", " ") for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("name", _existing(KERNEL_NOTEBOOKS))
def test_notebooks_say_where_kernels_run(name):
    """Each notebook that teaches a kernel stage says where in one line, linking to notebook 00a."""
    text = _markdown(name)
    assert text.count(WHERE_THIS_RUNS) == 1, f"{name}: the one-line 'Where this runs' is missing"
    assert WHERE_IT_RUNS not in text  # the full statement is notebook 00's


def test_notebook_00_says_where_the_kernels_run():
    """The one full account: both targets, the three machines, and what "modeled" means."""
    nb = nbformat.read(NOTEBOOKS_DIR / "00a_setup_and_tour.ipynb", as_version=4)
    # its heading is the anchor the one-line form links to: #Where-the-kernels-run
    cells = [c.source for c in nb.cells if c.source.startswith(WHERE_SECTION + "\n")]
    assert len(cells) == 1, f"notebook 00 needs exactly one {WHERE_SECTION!r} cell"
    section = " ".join(cells[0].split())
    for said in (
        WHERE_IT_RUNS,
        "compile-verified only",
        "never run anywhere",
        "compiled on a CPU",
        "SASS",
        "TMEM",
        "budget model",
        "float32 reference first and timed only after it passes",
        "CPU only",
        "*replayed*",
        "results/H200/",
        "labeled *modeled*",
    ):
        assert said in section, f"notebook 00's section lacks {said!r}"


def test_the_benchmarks_notebook_says_where_kernels_run():
    assert WHERE_IT_RUNS in _markdown("08a_benchmarks")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_where_kernels_run_is_not_repeated_at_length(path: Path):
    assert OLD_WHERE_PARAGRAPH not in _markdown(path.stem), (
        f"{path.name} repeats the long 'Where this runs' paragraph: use the one-line form that "
        "links to notebook 00"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebooks_leave_no_temporary_folders(path: Path):
    """A notebook that draws into a temporary folder must remove it (TemporaryDirectory)."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "mkdtemp(" not in code, f"{path.name} leaves a temporary folder behind on every run"


#: Phrases that use "stage" for a ring entry; the course says "stage" only for kernel stages.
RING_AS_STAGE = re.compile(
    r"pipeline stages?\b|stages fit|ring of shared-memory stages|\} stages\b|\b\d+ stages\b"
    r"|accumulator stages?\b|B stages\b|A stages\b"
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_one_vocabulary_stage_means_kernel_stage(path: Path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    found = RING_AS_STAGE.findall(text)
    assert not found, f"{path.name} says 'stage' for a ring entry: {found}"


#: Notebooks whose hidden answers, together, derive and check at least three numbers: the primer,
#: each kernel stage's notebooks, and the two notebooks of the default call.
EXERCISE_GROUPS = {
    "00c": ["00c_cute_primer"],
    **{f"stage {n}": names for n, names in STAGE_GROUPS.items()},
    "08": [s.notebook for s in STAGES if s.label.startswith("08")],
}


def _numeric_answers(name: str) -> int:
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    answers = re.findall(r"<details><summary>Answer</summary>(.*?)</details>", text, re.S)
    return sum(1 for a in answers if "```python" in a and re.search(r"\d\s*[·×x*/]\s*\d", a))


@pytest.mark.parametrize("group", list(EXERCISE_GROUPS))
def test_at_least_three_exercises_derive_and_check_a_number(group):
    """Hidden answers (<details>) that show the arithmetic and then check it with the package."""
    names = _existing(EXERCISE_GROUPS[group])
    counts = {name: _numeric_answers(name) for name in names}
    assert sum(counts.values()) >= 3, (
        f"{group}: {counts} exercises derive and check a number, at least 3 together"
    )


#: What the notebooks of each of kernel stages 4-7 show between them (issue 7's list): both
#: architectures' code, budgets checked against the compiled kernel, SASS, modeled B200 beside
#: measured H200, correctness, the measured step, the shared-memory explorer.
STAGE_CALLS = (
    "plot_stage_budgets(",
    "compile_many(",
    "assert rep.smem_bytes == rep.model_smem_bytes",
    "rep.tmem_columns == rep.model_tmem_columns",
    '"STL/LDL (spills)"] == 0',
    "step_latency_bars(",
    "check_table(",
    "ablation_step(results, STAGE)",
    "format_ablation_step(",
    "plot_ablation_step(",
    "time_step_live(",
    "SmemBudgetExplorer(stage_config(",
)


@pytest.mark.parametrize("stage", [4, 5, 6, 7])
def test_stage_notebooks_have_every_part(stage):
    """The union of a stage's notebooks holds every part (07a and 07b split stage 7 between
    them); each of its notebooks has a takeaway and exercises."""
    names = _existing(STAGE_GROUPS[stage])
    assert names, f"stage {stage} has no notebook"
    code, texts = [], {}
    for name in names:
        nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
        code += [c.source for c in nb.cells if c.cell_type == "code"]
        texts[name] = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(code)
    where = " + ".join(names)
    missing = [call for call in STAGE_CALLS if call not in code]
    assert not missing, f"stage {stage} ({where}) lacks {missing}"
    # a wave map where the stage changes the tile; where it keeps it, a check that it lands the same
    assert "plot_stage_occupancy(" in code or "same_tiles(" in code, f"{where} lacks the tiles"
    assert "sm100" in code and "sm90" in code, f"{where} shows only one architecture's code"
    for name, text in texts.items():
        assert "takeaway" in text.lower(), f"{name} has no takeaway"
        assert re.search(r"^## Exercises?\b", text, re.M), f"{name} has no '## Exercises'"


#: What the fake GPU's live timings return (s): stage N, stage N - 1, and any implementation alone.
LIVE_SECONDS = (400e-6, 420e-6)


def _run_with_a_fake_gpu(name, mode, monkeypatch, gpu_name=None, bars=None):
    """Every code cell of notebook ``name``, in this process, with the machine (``"hopper"`` or
    ``"blackwell"``; an H200 or a B200 unless ``gpu_name`` names another), the check and the
    timing faked. Returns the notebook's namespace, the impls checked, the stages timed step by
    step (``time_step_live``) and the impls timed alone (``harness.time_impl``). ``bars``, a list,
    receives every bar drawn by ``plot_latency_bars`` as ``(label, seconds)``."""
    import matplotlib

    matplotlib.use("Agg")
    import pearl_moe.course as course
    from pearl_moe.bench import harness
    from pearl_moe.bench.harness import CheckResult, Timing

    gpu = {"hopper": ("NVIDIA H200", (9, 0)), "blackwell": ("NVIDIA B200", (10, 0))}[mode]
    if gpu_name:
        gpu = (gpu_name, gpu[1])
    monkeypatch.setattr(course, "detect_machine", lambda force=None: course.Machine(mode, *gpu))
    if bars is not None:
        from pearl_moe.course import plots

        drawn = course.plot_latency_bars

        def plot_latency_bars(items, *args, **kwargs):
            bars.extend((item[0], item[1]) for item in items)
            return drawn(items, *args, **kwargs)

        monkeypatch.setattr(course, "plot_latency_bars", plot_latency_bars)
        monkeypatch.setattr(plots, "plot_latency_bars", plot_latency_bars)
    monkeypatch.setattr(course, "can_run_live", lambda arch, stage: (True, f"fake {arch}"))
    checked, timed, timed_alone = [], [], []

    def check(impl, problem, device="cuda", seed=1):
        checked.append(impl.name)
        return CheckResult(True, 0.01, 0.01, 0.03, 1e-3, 0, "ok"), {}

    monkeypatch.setattr(harness, "check", check)
    monkeypatch.setattr(
        harness,
        "measure_ceilings",
        lambda *a, **k: {"read_bytes_per_s": 4.2e12, "bf16_flops_per_s": 8e14},
    )

    def time_step_live(stage, problem, rounds=5, reps=5, floor_s=None):
        timed.append(stage)
        return {"model": "GLM 5.3", "tokens": 64, "floor_us": floor_s * 1e6,
                "prev_us": LIVE_SECONDS[1] * 1e6, "this_us": LIVE_SECONDS[0] * 1e6, "status": ("ok", "ok"), "outputs_ok": True, "ratio": 0.95,
                "lo": 0.94, "hi": 0.96, "rounds": 5, "verdict": "faster"}  # fmt: skip

    def time_impl(impl, problem, *args, **kwargs):
        timed_alone.append(impl.name)
        return Timing.from_rounds([[LIVE_SECONDS[0]]], 10, 1), {}

    def time_interleaved(impls, problem, *args, **kwargs):  # several impls timed together
        timing = Timing.from_rounds([[LIVE_SECONDS[0]]] * 5, 10, 1)
        timing.outputs_ok = True
        return {key: (timing, {}) for key in impls}

    monkeypatch.setattr(course, "time_step_live", time_step_live)
    monkeypatch.setattr(harness, "time_impl", time_impl)
    monkeypatch.setattr(harness, "time_interleaved", time_interleaved)
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    namespace = {"display": lambda *a, **k: None}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.startswith("%%cute_compile"):
            # a write-it-yourself kernel: test_exercises and the headless run compile it; here its
            # reports are empty (check_exercise then says "not compiled" and goes on)
            from pearl_moe.course.scratch import _magic_parser

            magic = cell.source.split("\n", 1)[0].removeprefix("%%cute_compile")
            namespace[_magic_parser().parse_args(shlex.split(magic)).name] = {}
        elif cell.cell_type == "code":
            code = "\n".join(ln for ln in cell.source.splitlines() if not ln.startswith("%"))
            exec(compile(code, f"{name} cell {i}", "exec"), namespace)  # noqa: S102
    return namespace, checked, timed, timed_alone


#: The machine each mode fakes, as the course map names it in "runs on", and the GPU it is: the
#: Hopper GPU is an H100, so that a bar labeled from anything but the data (the committed runs
#: are the H200's) shows.
MODE_MACHINE = {"hopper": "Hopper", "blackwell": "Blackwell"}
MODE_GPU = {"hopper": "NVIDIA H100 80GB HBM3", "blackwell": "NVIDIA B200"}


def _live_bars(bars) -> list[str]:
    """The labels of the bars that carry a value the fake GPU measured."""
    return [label for label, seconds in bars
            if seconds is not None and any(abs(seconds - t) < 1e-9 for t in LIVE_SECONDS)]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hopper", "blackwell"])
@pytest.mark.parametrize("stage", [4, 5, 6, 7])
def test_stage_notebooks_live_branches_with_a_fake_gpu(stage, mode, monkeypatch):
    """The cells a CPU never runs (live check, live timing), run with a fake GPU, so a live run
    cannot die of a name error. Every notebook of the stage runs; those the course map says run
    live on this machine, together, check two problems at stages N - 1 and N and time stage N
    against N - 1 once (on a B200: the sm_100a kernels' first timed runs). A plot's GPU label
    comes from the data it plots: on the fake H100 every live bar is labeled H100."""
    checked, timed, bars = [], [], []
    live = [n for n in _existing(STAGE_GROUPS[stage])
            if MODE_MACHINE[mode] in COURSE_MAP[n].runs_on]  # fmt: skip
    for name in _existing(STAGE_GROUPS[stage]):
        with monkeypatch.context() as m:
            namespace, got, steps, _ = _run_with_a_fake_gpu(name, mode, m, MODE_GPU[mode], bars)
        if name in live:
            assert namespace.get("STAGE") == stage, f"{name} sets STAGE = {namespace.get('STAGE')}"
            checked += got
            timed += steps
        else:
            assert not steps, f"{name} does not run on {MODE_MACHINE[mode]} but timed {steps}"
    if live:
        where = " + ".join(live)
        assert len(checked) == 4, f"{where} on {mode}: checked {checked}, not 2 problems x 2 stages"
        assert timed == [stage], f"{where} on {mode}: timed stages {timed}, not [{stage}]"
    if mode == "hopper" and live:
        labels = _live_bars(bars)
        assert labels, f"{where} drew no live bar on a fake H100 (bars: {[b[0] for b in bars]})"
        wrong = [label for label in labels if not label.startswith("H100")]
        assert not wrong, f"{where}: live bars measured on an H100 labeled {wrong}"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hopper", "blackwell"])
def test_stage_3_notebooks_live_branches_with_a_fake_gpu(mode, monkeypatch):
    """Stage 3's notebooks on a fake GPU, together: stage 3 checked live, its step timed once,
    and on a Hopper GPU the ring-depth sweep (every depth that fits, two tile heights); on a
    B200 the sweep only checks."""
    checked, timed, timed_alone = {}, [], []
    for name in _existing(STAGE_3_NOTEBOOKS):
        with monkeypatch.context() as m:
            _, got, steps, alone = _run_with_a_fake_gpu(name, mode, m, MODE_GPU[mode])
        checked[name] = got
        timed += steps
        timed_alone += alone
    assert any("pearl stage 3" in got for got in checked.values()), f"nothing checked: {checked}"
    assert all(set(got) <= {"pearl stage 3"} for got in checked.values()), checked
    assert timed == [3], f"stage 3's step timed {timed} times across {list(checked)}"
    # ring 2-6 at 128 x 128, ring 2-8 at 64 x 128, on a Hopper GPU only
    assert timed_alone == (["pearl stage 3"] * (5 + 7) if mode == "hopper" else []), timed_alone


def test_benchmarks_notebook_replays_measured_runs_and_labels_b200_as_modeled():
    nb = nbformat.read(NOTEBOOKS_DIR / "08a_benchmarks.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert 'results.load_run("H200", "compare")' in code and "detect_machine()" in code
    assert "B200, modeled" in code and "modeled" in text
    for baseline in ("cuBLAS", "grouped_mm", "quack", "Triton", "FlashInfer"):
        assert baseline in text, baseline

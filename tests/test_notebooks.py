"""Every notebook runs top to bottom headlessly, and is committed without outputs.

Notebooks are found by glob, so a new notebook is tested as soon as it lands in ``notebooks/``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

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


#: The two notebooks of kernel stage 3: the persistent, warp-specialized kernel, then the bytes it
#: keeps in flight (ring depth, Little's law, the latency model).
STAGE_3_NOTEBOOKS = ["03a_persistent_schedule", "03c_bytes_in_flight"]

#: The stage notebooks of kernel stages 4-7 (the post's four optimizations).
STAGE_NOTEBOOKS = [
    "04_direct_store",
    "05_64_row_tiles",
    "06_wide_b_loads",
    "07a_split_accumulator_blackwell",
]


def _markdown(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    return " ".join(c.source.replace("\n", " ") for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize(
    "name", ["01a_stage1_kernel", "02_grouped_gemm", *STAGE_3_NOTEBOOKS, *STAGE_NOTEBOOKS]
)
def test_notebooks_say_where_kernels_run(name):
    """Each notebook that runs kernel stages says where in one line, linking to notebook 00."""
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


def test_notebook_09_says_where_kernels_run():
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


@pytest.mark.parametrize(
    "name",
    [
        "00a_setup_and_tour",
        "00c_cute_primer",
        "01a_stage1_kernel",
        "02_grouped_gemm",
        *STAGE_3_NOTEBOOKS,
        *STAGE_NOTEBOOKS,
        "08a_benchmarks",
    ],
)
def test_one_vocabulary_stage_means_kernel_stage(name):
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert not RING_AS_STAGE.findall(text), RING_AS_STAGE.findall(text)


@pytest.mark.parametrize(
    "name",
    [
        "00c_cute_primer",
        "01a_stage1_kernel",
        "02_grouped_gemm",
        *STAGE_3_NOTEBOOKS,
        *STAGE_NOTEBOOKS,
        "08a_benchmarks",
    ],
)
def test_at_least_three_exercises_derive_and_check_a_number(name):
    """Hidden answers (<details>) that show the arithmetic and then check it with the package."""
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    answers = re.findall(r"<details><summary>Answer</summary>(.*?)</details>", text, re.S)
    checked = [a for a in answers if "```python" in a and re.search(r"\d\s*[·×x*/]\s*\d", a)]
    assert len(checked) >= 3, f"{name}: {len(checked)} exercises derive and check a number"


@pytest.mark.parametrize("name", STAGE_NOTEBOOKS)
def test_stage_notebooks_have_every_part(name):
    """Issue 7's list for notebooks 05-08: both archs' code, budgets checked against the compiled
    kernel, SASS, occupancy, modeled B200 beside measured H200, correctness, the measured step,
    the shared-memory explorer, a takeaway."""
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for call in (
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
    ):
        assert call in code, f"{name} lacks {call}"
    # a wave map where the stage changes the tile; where it keeps it, a check that it lands the same
    assert "plot_stage_occupancy(" in code or "same_tiles(" in code, f"{name} lacks the tiles"
    assert "sm100" in code and "sm90" in code, f"{name} shows only one architecture's code"
    assert "**Objective.**" in text and "**Takeaway.**" in text and "## Exercises" in text


def _run_with_a_fake_gpu(name, mode, monkeypatch):
    """Every code cell of notebook ``name``, in this process, with the machine (``"hopper"`` or
    ``"blackwell"``), the check and the timing faked. Returns the notebook's namespace, the impls
    checked, the stages timed step by step (``time_step_live``) and the impls timed alone
    (``harness.time_impl``)."""
    import matplotlib

    matplotlib.use("Agg")
    import pearl_moe.course as course
    from pearl_moe.bench import harness
    from pearl_moe.bench.harness import CheckResult, Timing

    gpu = {"hopper": ("NVIDIA H200", (9, 0)), "blackwell": ("NVIDIA B200", (10, 0))}[mode]
    monkeypatch.setattr(course, "detect_machine", lambda force=None: course.Machine(mode, *gpu))
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
        return {"model": "GLM 5.3", "tokens": 64, "floor_us": floor_s * 1e6, "prev_us": 420.0,
                "this_us": 400.0, "status": ("ok", "ok"), "outputs_ok": True, "ratio": 0.95,
                "lo": 0.94, "hi": 0.96, "rounds": 5, "verdict": "faster"}  # fmt: skip

    def time_impl(impl, problem, *args, **kwargs):
        timed_alone.append(impl.name)
        return Timing.from_rounds([[400e-6]], 10, 1), {}

    def time_interleaved(impls, problem, *args, **kwargs):  # several impls timed together
        timing = Timing.from_rounds([[400e-6]] * 5, 10, 1)
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


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hopper", "blackwell"])
@pytest.mark.parametrize("name", STAGE_NOTEBOOKS)
def test_stage_notebooks_live_branches_with_a_fake_gpu(name, mode, monkeypatch):
    """The cells a CPU never runs (live check, live timing), run with a fake GPU, so a live run
    cannot die of a name error."""
    namespace, checked, timed, _ = _run_with_a_fake_gpu(name, mode, monkeypatch)
    stage = namespace["STAGE"]
    assert len(checked) == 4  # two problems x stages N - 1 and N
    # stage N is timed against N - 1 on both GPUs (on a B200: the sm_100a kernels' first timed runs)
    assert timed == [stage]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hopper", "blackwell"])
@pytest.mark.parametrize("name", STAGE_3_NOTEBOOKS)
def test_stage_3_notebooks_live_branches_with_a_fake_gpu(name, mode, monkeypatch):
    """Notebooks 04 and 04b on a fake GPU: each checks stage 3 live; 04b then times its ring-depth
    sweep on a Hopper GPU (every depth that fits, two tile heights) and only checks on a B200."""
    _, checked, timed, timed_alone = _run_with_a_fake_gpu(name, mode, monkeypatch)
    assert checked == ["pearl stage 3"] and timed == ([3] if name == "03a_persistent_schedule" else [])
    if name == "03c_bytes_in_flight" and mode == "hopper":
        # ring 2-6 at 128 x 128, ring 2-8 at 64 x 128
        assert timed_alone == ["pearl stage 3"] * (5 + 7)
    else:
        assert timed_alone == []


def test_benchmarks_notebook_replays_measured_runs_and_labels_b200_as_modeled():
    nb = nbformat.read(NOTEBOOKS_DIR / "08a_benchmarks.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert 'results.load_run("H200", "compare")' in code and "detect_machine()" in code
    assert "B200, modeled" in code and "modeled" in text
    for baseline in ("cuBLAS", "grouped_mm", "quack", "Triton", "FlashInfer"):
        assert baseline in text, baseline

"""Every notebook runs top to bottom headlessly, and is committed without outputs.

Notebooks are found by glob, so a new notebook is tested as soon as it lands in ``notebooks/``.
"""

from __future__ import annotations

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


@pytest.mark.parametrize(
    "name", ["00_setup_and_tour", "02_plain_gemm", "03_grouped_gemm", "04_bytes_in_flight"]
)
def test_notebooks_say_where_kernels_run(name):
    nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    text = " ".join(c.source.replace("\n", " ") for c in nb.cells if c.cell_type == "markdown")
    assert WHERE_IT_RUNS in text

"""scripts/exec_notebooks.py: the notebooks' code cells as plain Python, magics included."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "exec_notebooks.py"


def _load():
    spec = importlib.util.spec_from_file_location("exec_notebooks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cute_compile_cells_run_through_the_magic_and_other_magics_are_skipped(
    tmp_path, monkeypatch
):
    from pearl_moe.course import scratch

    seen = []

    def fake_magic(line, cell, user_ns):
        seen.append((line.strip(), cell))
        user_ns["attempt"] = {"sm_90a": "report"}

    monkeypatch.setattr(scratch, "cute_compile", fake_magic)
    cells = [
        "%%cute_compile --as attempt\ndef host():\n    pass",
        "%matplotlib inline\nresult = attempt['sm_90a']",
    ]
    nb = {"cells": [{"cell_type": "code", "source": c} for c in cells]}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    _load().run(path)
    assert seen == [("--as attempt", "def host():\n    pass")]

"""On a GPU: a kernel loaded from the disk cache by a fresh process computes the right output, also
when replayed from a CUDA graph, and loading it is faster than compiling it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


def _first_call():
    spec = importlib.util.spec_from_file_location("first_call", ROOT / "scripts" / "first_call.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fresh_process_loads_the_cached_kernel_and_it_is_right(tmp_path):
    first_call = _first_call()
    cache = str(tmp_path / "kernels")
    cold = first_call.run_child("glm", 64, cache)
    warm = first_call.run_child("glm", 64, cache)
    for run in (cold, warm):
        assert "error" not in run, run.get("error")
        assert run["output_ok"], run["output_message"]
        assert run["graph_ok"], run["graph_message"]
    assert cold["stats"]["misses"] >= 1 and cold["stats"]["stores"] >= 1
    assert warm["stats"]["misses"] == 0 and warm["stats"]["hits"] >= 1
    assert warm["first_call_s"] < cold["first_call_s"]

"""Shared test setup: GPU tests run only where torch sees a CUDA device; plots draw off-screen."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def package_tuning_table(monkeypatch):
    """The default call picks from the package's own tuning table: no ``PEARL_MOE_TUNING``, no
    table a test installed, before and after the test."""
    from pearl_moe.kernels import autotune

    monkeypatch.delenv(autotune.ENV_TABLE, raising=False)
    autotune.use_table(None)
    yield
    autotune.use_table(None)


@pytest.fixture
def wheel_nvdisasm_on_path(monkeypatch):
    """Put the ``nvidia-cuda-nvdisasm`` wheel's nvdisasm first on PATH (the disassembler a machine
    uses when the DSL refuses to dump SASS itself); skips where the wheel is not installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec else []:
        for found in Path(root).glob("*/bin/nvdisasm"):
            monkeypatch.setenv("PATH", f"{found.parent}{os.pathsep}{os.environ['PATH']}")
            return found.parent
    pytest.skip("the nvidia-cuda-nvdisasm wheel is not installed")

"""The 192-row ping-pong tile's trial patch still applies to the package (it has not run on a GPU
yet), and the A/B reading tool agrees with the uniform-index study's own reading."""

import shutil
import subprocess

import pytest
from analysis import EXPERIMENTS, data

from pearl_moe.bench.compare import geomean

ROOT = EXPERIMENTS.parent


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_trial_patch_applies_to_the_package():
    patch = EXPERIMENTS / "pingpong_192_rows" / "pingpong_192_rows.patch"
    check = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_paired_ratios_reads_an_ab_run_as_the_study_did():
    """``tools/paired_ratios.py`` on the uniform-index A/B's run after the change: ours / quack
    0.976 over the 20 held-out 4096-token layers, as ``down_profile/uniform_ab.py`` reads it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "paired", EXPERIMENTS / "tools" / "paired_ratios.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.ratios(str(data("down_profile", "uniform_ab_heldout_after.json.gz")))
    assert set(table) == {"pearl"} and len(table["pearl"]) == 20
    assert round(geomean(list(table["pearl"].values())), 3) == 0.976

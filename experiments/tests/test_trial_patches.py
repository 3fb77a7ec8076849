"""The trial builds kept as patches until they have run on a GPU still apply to the package, so
their A/B scripts can apply them on the device machine."""

import shutil
import subprocess

import pytest
from analysis import EXPERIMENTS

PATCHES = [
    "pingpong_tma_store/pingpong_tma_store.patch",
    "pingpong_192_rows/pingpong_192_rows.patch",
]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("patch", PATCHES)
def test_the_trial_patch_applies_to_the_package(patch):
    check = subprocess.run(
        ["git", "apply", "--check", str(EXPERIMENTS / patch)],
        cwd=EXPERIMENTS.parent, capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr

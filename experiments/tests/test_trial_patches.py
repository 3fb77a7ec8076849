"""The trial builds kept as patches still apply to the package, so their A/B scripts can apply
them on the device machine (the 192-row ping-pong tile's patch left for the package itself)."""

import shutil
import subprocess

import pytest
from analysis import EXPERIMENTS

PATCHES = [
    "pingpong_tma_store/pingpong_tma_store.patch",
]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("patch", PATCHES)
def test_the_trial_patch_applies_to_the_package(patch):
    check = subprocess.run(
        ["git", "apply", "--check", str(EXPERIMENTS / patch)],
        cwd=EXPERIMENTS.parent, capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr

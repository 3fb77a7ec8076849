"""The trial builds kept as patches still apply to the package they were written for, so their A/B
scripts can apply them on the device machine: each patch to its base commit (the package has moved
since: the budget merged into config.py, the rules into kernels/rules.py). The 192-row ping-pong
tile's patch left for the package itself."""

import os
import shutil
import subprocess

import pytest
from analysis import EXPERIMENTS

#: patch -> the commit it applies to (the last one before the package split)
PATCHES = {
    "pingpong_tma_store/pingpong_tma_store.patch": "aaf3d12",
}


def _git(*args, env=None):
    return subprocess.run(
        ["git", *args], cwd=EXPERIMENTS.parent, capture_output=True, text=True, env=env
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("patch", PATCHES)
def test_the_trial_patch_applies_to_its_base_commit(patch, tmp_path):
    base = PATCHES[patch]
    if _git("cat-file", "-e", f"{base}^{{commit}}").returncode:
        pytest.skip(f"commit {base} is not in this clone (a shallow clone?)")
    env = dict(os.environ, GIT_INDEX_FILE=str(tmp_path / "index"))
    assert _git("read-tree", base, env=env).returncode == 0
    check = _git("apply", "--cached", "--check", str(EXPERIMENTS / patch), env=env)
    assert check.returncode == 0, check.stderr

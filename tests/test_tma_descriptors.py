"""The descriptor probe the selftest runs first on a new GPU compiles for both targets (no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CODE = textwrap.dedent(
    """
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from pearl_moe.diagnostics.descriptor_check import DescriptorProbe
    from pearl_moe.kernels.host import placeholder_ptr
    from pearl_moe.kernels.sm100.tma_descriptors import TMA_DESCRIPTOR_BYTES

    probe = DescriptorProbe()
    ws = placeholder_ptr(cutlass.Int64, TMA_DESCRIPTOR_BYTES)
    c = cute.compile(probe, placeholder_ptr(), placeholder_ptr(cutlass.Int32, 4), ws, 1, -1, 3,
                     256, 6, cuda.CUstream(0))
    h = cute.compile(probe.host_encoded, placeholder_ptr(), ws, 1, 256, cuda.CUstream(0))
    ptx = c.artifacts.PTX
    print("replace", sum("tensormap.replace.tile" in ln for ln in ptx.splitlines()))
    print("release", "fence.proxy.tensormap::generic.release.gpu" in ptx)
    print("acquire", "fence.proxy.tensormap::generic.acquire.gpu" in ptx)
    print("store", "UTMASTG" in c.artifacts.SASS)
    print("target", [ln for ln in ptx.splitlines() if ln.startswith(".target")][0])
    """
)


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a", "sm_103a"])
def test_descriptor_probe_compiles(target, tmp_path):
    env = dict(os.environ, CUTE_DSL_ARCH=target, CUTE_DSL_KEEP="ptx,sass")
    res = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=600,
        cwd=tmp_path,  # the kept PTX and SASS land there, not in the checkout
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines())
    # the copy is patched (address, extents, strides), released, acquired, stored through
    assert int(lines["replace"]) >= 3
    assert lines["release"] == lines["acquire"] == lines["store"] == "True"
    assert lines["target"] == f".target {target}"

"""The descriptor probe the selftest runs on a new GPU compiles for every target (no GPU), with the
GEMM's own C store: the staging layout (box and swizzle) each sm_100a TMA-store configuration's
kernel builds, and the acquire-then-store sequence its epilogue issues."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pearl_moe.diagnostics.descriptor_check import STORE_CONFIGS, store_box

CODE = textwrap.dedent(
    """
    import json, sys
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.tensor_utils import LayoutEnum
    from pearl_moe.diagnostics.descriptor_check import DescriptorProbe, STORE_CONFIGS
    from pearl_moe.kernels.host import placeholder_ptr
    from pearl_moe.kernels.sm100.stage3_persistent import build
    from pearl_moe.kernels.sm100.tma_descriptors import TMA_DESCRIPTOR_BYTES

    names, gemm = sys.argv[1].split(","), sys.argv[2] == "gemm"
    ws = placeholder_ptr(cutlass.Int64, TMA_DESCRIPTOR_BYTES)
    out = {}
    for name in names:
        probe = DescriptorProbe(STORE_CONFIGS[name])
        c = cute.compile(probe, placeholder_ptr(), placeholder_ptr(cutlass.Int32, 4), ws, 1, -1,
                         3, 512, 6, cuda.CUstream(0))
        ptx, sass = c.artifacts.PTX, c.artifacts.SASS or ""
        row = {
            "replace": sum("tensormap.replace.tile" in ln for ln in ptx.splitlines()),
            "release": "fence.proxy.tensormap::generic.release.gpu" in ptx,
            "acquire": ptx.count("fence.proxy.tensormap::generic.acquire.gpu"),
            "stores": ptx.count("cp.async.bulk.tensor.2d.global.shared"),
            "utmastg": "UTMASTG" in sass,
            "target": [ln for ln in ptx.splitlines() if ln.startswith(".target")][0],
            "staging": probe.staging_text,
        }
        if gemm:
            # the staging layout the GEMM kernel itself sets up (its _setup, traced for sm_100a)
            kernel = build(probe.config, 148, probe.stage)

            @cute.kernel
            def holds(atom: cute.CopyAtom):
                pass

            @cute.jit
            def setup(c_ptr: cute.Pointer):
                mC = cute.make_tensor(c_ptr, cute.make_layout((64, 512), stride=(512, 1)))
                kernel._setup(mC.element_type, mC.element_type, LayoutEnum.from_tensor(mC))
                row["gemm_staging"] = str(kernel.c_smem_layout)
                atom, _ = kernel._make_tma_store_atom(mC)
                holds(atom).launch(grid=(1, 1, 1), block=[32, 1, 1])

            cute.compile(setup, placeholder_ptr())
        out[name] = row
    print("PROBE=" + json.dumps(out))
    """
)


def _compile(target: str, names, tmp_path, gemm=False) -> dict:
    env = dict(os.environ, CUTE_DSL_ARCH=target, CUTE_DSL_KEEP="ptx,sass")
    worker = tmp_path / "probe_worker.py"  # the DSL reads a jit function's source from its file
    worker.write_text(CODE)
    res = subprocess.run(
        [sys.executable, str(worker), ",".join(names), "gemm" if gemm else "-"],
        capture_output=True, text=True, env=env, timeout=900,
        cwd=tmp_path,  # the kept PTX and SASS land there, not in the checkout
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("PROBE="))
    return json.loads(line[len("PROBE=") :])


def test_store_boxes_are_the_kernels():
    """The C store of a 128-row CTA tile at ``epi_tile_n=32`` is a 128 x 32 box with a 64-byte
    swizzle; the folded 2-CTA 128-row tile stores two 64 x 16 boxes (32-byte swizzle) a step."""
    assert store_box(STORE_CONFIGS["1cta-128x128"]) == dict(
        rows=128, cols=32, swizzle=64, per_step=1
    )
    assert store_box(STORE_CONFIGS["2cta-256x256"]) == dict(
        rows=128, cols=32, swizzle=64, per_step=1
    )
    folded = dict(rows=64, cols=16, swizzle=32, per_step=2)
    assert store_box(STORE_CONFIGS["2cta-128x256-folded"]) == folded
    assert store_box(STORE_CONFIGS["2cta-128x512-folded"]) == folded
    assert store_box(STORE_CONFIGS["1cta-128x128-epi64"])["swizzle"] == 128


#: swizzle bytes -> the Swizzle<B, 4, 3> of the staging layout
_SWIZZLE = {32: "S<1,4,3>", 64: "S<2,4,3>", 128: "S<3,4,3>"}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_descriptor_probe_compiles_with_the_gemms_c_store(target, tmp_path):
    names = list(STORE_CONFIGS)
    found = _compile(target, names, tmp_path, gemm=target == "sm_100a")
    for name in names:
        row, box = found[name], store_box(STORE_CONFIGS[name])
        # the copy is patched (address, extents, strides), released, acquired, stored through
        assert row["replace"] >= 3 and row["release"] and row["acquire"] >= 1, name
        assert row["utmastg"] and row["target"] == f".target {target}", name
        assert row["staging"].startswith(_SWIZZLE[box["swizzle"]]), (name, row["staging"])
        if target == "sm_100a":
            assert row["staging"] == row["gemm_staging"], name
    # a folded step is two boxes: twice the stores of a plain 128-row tile's
    assert found["2cta-128x256-folded"]["stores"] == 2 * found["1cta-128x256"]["stores"]


def test_descriptor_probe_compiles_for_a_b300(tmp_path):
    found = _compile("sm_103a", ["1cta-128x128"], tmp_path)
    assert found["1cta-128x128"]["target"] == ".target sm_103a"
    assert found["1cta-128x128"]["utmastg"]

"""Many tiles a CTA: the persistent kernels of both families on a small grid (``pytest -m gpu``).

A full GPU gives each CTA one tile or none at the suite's problem sizes, so what happens between
one tile and the next in the same CTA is rarely run: the A/B ring wrapping across tiles, the
accumulator buffers' phase bits, the epilogue buffers' rotation, and (sm_100a stage 7) the split
accumulator's slot 0 of the next tile filling while the epilogue drains slot 1, or (sm_90a stage
7) the ping-pong warpgroups handing tiles over. Here each case
(:data:`pearl_moe.diagnostics.gpu_cases.MULTI_TILE`) is compiled for a grid of 2-4 CTAs or
clusters of two and K tiles several times every ring (stage 7 at least 3 x its ``hold``), so each
CTA runs 5-70 tiles, launched as ``grouped_gemm`` launches (:func:`gpu_cases.run_on_grid`).

The same cases run under compute-sanitizer in the selftest (``python -m pearl_moe selftest
--phases multitile``: memcheck, racecheck, synccheck); each case runs on the GPU whose family it
names and skips on the other.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.diagnostics import gpu_cases as gc  # noqa: E402

pytestmark = pytest.mark.gpu
FAMILY = gc.gpu_family()

PARAMS = [
    pytest.param(
        arch,
        case,
        id=f"{arch}-{case.id}",
        marks=pytest.mark.skipif(FAMILY != arch, reason=f"needs a GPU that runs {arch} kernels"),
    )
    for arch in gc.ARCHS
    for case in gc.MULTI_TILE[arch]
]


@pytest.mark.parametrize("arch, case", PARAMS)
def test_many_tiles_a_cta_are_right_and_repeat_bit_for_bit(arch, case):
    """Right against the fp32 reference (fused cases: nothing written outside ``out``), and a
    second launch on the same inputs gives the same bits."""
    res = gc.check_any(case, seed=11, keep_output=True)
    out = res.pop("output")
    assert res["ok"], (case.id, res)
    again = gc.check_any(case, seed=11, keep_output=True)
    assert torch.equal(again.pop("output"), out), "a second launch gave other bits"


def test_the_grid_is_what_the_case_asks_and_checked():
    """The small grid reaches the kernel (a whole number of clusters, no more than fit)."""
    from pearl_moe.bench.verify import random_inputs

    if FAMILY is None:
        pytest.skip("needs a GPU the kernels run on")
    case = next(
        c for c in gc.MULTI_TILE[FAMILY] if c.config.cta_group == 2 or c.config.cluster_n == 2
    )
    A, W, offs = random_inputs(case.counts, case.n, case.k)
    out = torch.empty(A.shape[0], case.n, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="multiple of the cluster"):
        gc.run_on_grid(A, W, offs, out, case.stage, case.config, case.ctas + 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with pytest.raises(ValueError, match="at most"):
        gc.run_on_grid(A, W, offs, out, case.stage, case.config, 2 * sms)

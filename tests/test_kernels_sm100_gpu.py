"""The options of the sm_100a kernels on a B200 (or B300), against an fp32 reference (``pytest -m gpu``).

The twin of ``test_kernels_sm90_gpu.py``: what both kernel families share (every stage on edge
cases, the course models, the fused activation on every tile family, unchecked offsets, CUDA
graphs with re-routing, prefill repeats) is in ``test_kernels_gpu.py``, many tiles a CTA in
``test_multi_tile_gpu.py``. Here: every tile family of the persistent kernel (1-CTA 128 and 64
rows, 2-CTA 256 rows, the folded 2-CTA 128-row tile) with each store (TMA stores through
per-expert descriptors, direct 256- and 128-bit stores), wide B entries, one or two accumulator
slots, and the tile scheduler's walks. Every case here is compiled for sm_100a on a CPU by
``tests/test_compile_gpu_cases.py`` before any B200 runs it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.diagnostics import gpu_cases as gc  # noqa: E402
from pearl_moe.diagnostics.gpu_cases import Case  # noqa: E402
from pearl_moe.workloads import make_problem  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        gc.gpu_family() != "sm_100a", reason="needs a GPU that runs the sm_100a kernels (B200)"
    ),
]


@pytest.mark.parametrize(
    "variant, shape",
    [(v, s) for v, (_, _, shapes) in gc.VARIANTS_SM100.items() for s in shapes],
    ids=[f"{v}-{s}" for v, (_, _, shapes) in gc.VARIANTS_SM100.items() for s in shapes],
)
def test_tile_families_and_options(variant, shape):
    """Each option on one shape, over every row pattern of :data:`gc.COUNTS` (one compiled
    kernel: the rows are run-time values); every failing pattern is reported, not the first."""
    stage, changes, _ = gc.VARIANTS_SM100[variant]
    config = gc.course("sm_100a", stage, **changes)
    n, k = gc.SHAPES[shape]
    failed = {}
    for i, (name, counts) in enumerate(gc.COUNTS.items()):
        res = gc.check_case(Case(name, stage, config, counts, n, k), seed=i)
        if not res["ok"]:
            failed[name] = res
    assert not failed, failed


@pytest.mark.parametrize("walk", gc.WALKS)
def test_walks_over_many_ragged_experts(walk):
    """112 experts (four 32-lane steps of the warp-parallel walk), skewed routing: empty experts
    and experts that end mid-tile on both sides of each 32-expert boundary."""
    p = make_problem("Kimi K3", 64, ep=8, routing="skewed", seed=5)
    case = Case(walk, 6, gc.course("sm_100a", 6, walk=walk), tuple(p.counts), p.n, p.k)
    res = gc.check_case(case, seed=5)
    assert res["ok"], res


def test_grouped_gemm_refuses_the_gather_cleanly():
    """A's rows through an index exist in the sm_90a kernels only: a ``ValueError`` before any
    launch, and the context stays usable."""
    from pearl_moe.bench.verify import random_inputs
    from pearl_moe.kernels import grouped_gemm

    counts = gc.COUNTS["zero-row-experts"]
    A, W, offs = random_inputs(counts, *gc.SHAPES["small"])
    index = torch.arange(A.shape[0], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="sm_90a"):
        grouped_gemm(A, W, offs, a_index=index)
    assert grouped_gemm(A, W, offs, stage=3).isfinite().all()

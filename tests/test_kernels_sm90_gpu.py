"""sm_90a kernels on a real Hopper GPU: every stage against an fp32 reference (``pytest -m gpu``).

Inputs are fresh random numbers, outputs are poisoned with NaN first, and the tolerance is twice
PyTorch's own bf16 error on the same inputs plus a small floor (see pearl_moe.kernels.verify).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
        reason="needs a Hopper (sm_90) GPU",
    ),
]

from pearl_moe.kernels import grouped_gemm  # noqa: E402
from pearl_moe.kernels.verify import random_inputs, run_checked  # noqa: E402
from pearl_moe.workloads import MODELS, make_problem  # noqa: E402

STAGES = (1, 2, 3)
TOKENS = (1, 16, 64, 256, 1024)
ROUTINGS = ("balanced", "random", "skewed")


def _check(stage, counts, n, k, W=None, seed=0, cu_seqlens=False):
    A, W, offs = random_inputs(counts, n, k, W=W, seed=seed)
    host = offs.tolist()
    if cu_seqlens:
        offs = torch.cat([torch.zeros(1, dtype=torch.int32, device=offs.device), offs])
    res = run_checked(
        lambda A, W, o, out: grouped_gemm(A, W, o, out=out, stage=stage), A, W, offs, host
    )
    assert res["ok"], res
    return res


@pytest.fixture(scope="module")
def model_weights():
    cache = {}

    def get(name):
        if name not in cache:
            cache.clear()  # one model's weights at a time (Kimi K3: 4.9 GB)
            torch.cuda.empty_cache()
            p = make_problem(name, 1, ep=8)
            g = torch.Generator(device="cuda").manual_seed(1)
            w = torch.randn(p.experts, p.n, p.k, generator=g, device="cuda", dtype=torch.bfloat16)
            cache[name] = w.mul_(p.k**-0.5)
        return cache[name]

    return get


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("stage", STAGES)
def test_models(model_weights, model, stage):
    W = model_weights(model)
    for tokens in TOKENS:
        for routing in ROUTINGS:
            p = make_problem(model, tokens, ep=8, routing=routing, seed=tokens)
            _check(stage, p.counts, p.n, p.k, W=W, seed=tokens)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    "counts, n, k",
    [
        ((0, 37, 0, 0, 200, 0, 1, 0), 2816, 4096),  # zero-row experts, n not a multiple of tile_n
        ((1,), 4096, 6144),  # a single row
        ((128, 256, 384), 256, 512),  # rows a multiple of the tile
        ((5, 127, 129, 0, 3), 136, 200),  # k not a multiple of tile_k, tiny n
        ((300, 0, 0, 0), 1024, 1024),  # everything in the first expert
        ((0, 0, 0, 300), 1024, 1024),  # everything in the last expert
    ],
)
def test_edge_cases(stage, counts, n, k):
    _check(stage, counts, n, k, seed=sum(counts))


@pytest.mark.parametrize("stage", (2, 3))
def test_cu_seqlens_and_graph_capture(stage):
    counts = (17, 0, 64, 3)
    A, W, offs = random_inputs(counts, 512, 256, seed=3)
    cu = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), offs])
    ref = grouped_gemm(A, W, offs, stage=stage)
    out = torch.full_like(ref, float("nan"))
    grouped_gemm(A, W, cu, out=out, stage=stage, check=False)  # compile outside the capture
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_gemm(A, W, cu, out=out, stage=stage, check=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ref)


def test_bad_offsets_raise_before_launch():
    A, W, offs = random_inputs((4, 4), 256, 256)
    with pytest.raises(ValueError, match="monotone"):
        grouped_gemm(A, W, torch.tensor([6, 4], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="end at row"):
        grouped_gemm(A, W, torch.tensor([4, 7], dtype=torch.int32, device="cuda"))
    torch.cuda.synchronize()  # the context is still usable
    assert grouped_gemm(A, W, offs).isfinite().all()

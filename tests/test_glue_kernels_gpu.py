"""The layer's Triton glue kernels on a GPU (``pytest -m gpu``): the routing metadata equal to the
torch version's, the combine within half a bf16 ulp of a float64 sum and the same bits on every
call, both the default on CUDA and replayable in a CUDA graph."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from pearl_moe.moe import combine, route_topk  # noqa: E402

FIELDS = ("counts", "offsets", "token_of_row", "row_of_slot", "weight_of_row", "topk_ids")


def _ids(tokens, top_k, experts, routing, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.randint(0, experts, (tokens, top_k), generator=g, device="cuda")
    if routing == "skewed":  # most rows on two experts, most experts empty
        hot = torch.rand(tokens, top_k, generator=g, device="cuda") < 0.9
        ids = torch.where(hot, ids % 2, ids)
    weights = torch.rand(tokens, top_k, generator=g, device="cuda")
    return ids, weights


@pytest.mark.parametrize("routing", ["balanced", "skewed"])
@pytest.mark.parametrize(
    "tokens,top_k,experts",
    [(1, 8, 32), (16, 8, 256), (64, 8, 32), (64, 8, 62), (256, 8, 48), (512, 8, 254),
     (4096, 8, 32), (4096, 8, 256), (1000, 1, 8), (3, 2, 1)],
)  # fmt: skip
def test_the_routing_kernels_give_the_torch_layout(tokens, top_k, experts, routing):
    ids, weights = _ids(tokens, top_k, experts, routing, seed=tokens + experts)
    want = route_topk(ids, weights, experts, kernels=False)
    for id_dtype in (torch.int64, torch.int32):
        got = route_topk(ids.to(id_dtype), weights, experts)  # on CUDA: the kernels
        for field in FIELDS:
            a, b = getattr(want, field), getattr(got, field)
            assert a.dtype == b.dtype and torch.equal(a, b), field


def test_ids_out_of_range_go_after_every_expert_unchecked():
    """With check=False (a captured graph) an id outside [0, E), also beyond int32, is sorted
    after every expert as in the torch version, counts for none, and its slot's row is -1 (the
    combine skips it: rows past the experts' hold NaN here and the output stays finite)."""
    ids, weights = _ids(40, 4, 16, "balanced", seed=5)
    ids[0, 0], ids[3, 1], ids[7, 2], ids[9, 3] = 16, -1, 2**32 + 1, -(2**32)
    want = route_topk(ids, weights, 16, check=False, kernels=False)
    got = route_topk(ids, weights, 16, check=False)
    for field in FIELDS:
        assert torch.equal(getattr(want, field), getattr(got, field)), field
    assert got.counts.sum().item() == 40 * 4 - 4
    assert (got.row_of_slot == -1).sum().item() == 4
    y = torch.randn(40 * 4, 256, device="cuda").bfloat16()
    y[40 * 4 - 4 :] = float("nan")
    out = combine(y, got)
    assert torch.isfinite(out).all() and torch.equal(out, combine(y, got))
    plain = combine(y, want, kernels=False)
    assert ((out.float() - plain.float()).abs() <= plain.float().abs() * 2.0**-7 + 1e-6).all()


@pytest.mark.parametrize("tokens,top_k,hidden", [(1, 8, 6144), (64, 8, 7168), (4096, 8, 2880)])
def test_the_combine_kernel_rounds_a_float32_sum_once(tokens, top_k, hidden):
    experts = 32
    ids, weights = _ids(tokens, top_k, experts, "balanced", seed=hidden)
    routing = route_topk(ids, weights / weights.sum(-1, keepdim=True), experts)
    y = torch.randn(tokens * top_k + 8, hidden, device="cuda").bfloat16()
    y[tokens * top_k :] = float("nan")  # rows no token reads
    got = combine(y, routing)  # the default on CUDA: the kernel
    slots = routing.row_of_slot
    exact = (routing.weight_of_row[slots].double().unsqueeze(-1) * y[slots].double()).sum(1)
    assert torch.isfinite(got).all()
    assert ((got.double() - exact).abs() <= exact.abs() * 2.0**-8 + 1e-6).all()
    assert torch.equal(got, combine(y, routing))
    plain = combine(y, routing, kernels=False)  # fused multiply-adds: last bits may differ
    assert ((got.float() - plain.float()).abs() <= plain.float().abs() * 2.0**-7 + 1e-6).all()


def test_the_glue_kernels_replay_in_a_cuda_graph():
    """Captured once, replayed on new top-k choices written into the same tensors."""
    tokens, top_k, experts, hidden = 300, 8, 64, 1024
    ids, weights = _ids(tokens, top_k, experts, "balanced", seed=1)
    y = torch.randn(tokens * top_k, hidden, device="cuda").bfloat16()
    route_topk(ids, weights, experts, check=False)  # compile outside the capture
    combine(y, route_topk(ids, weights, experts, check=False))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        routing = route_topk(ids, weights, experts, check=False)
        out = combine(y, routing)
    for seed in (2, 3):
        new_ids, new_weights = _ids(tokens, top_k, experts, "skewed", seed=seed)
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        graph.replay()
        want = route_topk(ids, weights, experts, kernels=False)
        assert torch.equal(routing.row_of_slot, want.row_of_slot)
        assert torch.equal(routing.offsets, want.offsets)
        assert torch.equal(out, combine(y, want))  # the eager kernel, the same bits


@pytest.mark.parametrize("tokens,top_k,experts,hidden", [
    (1, 8, 128, 2048), (16, 8, 20, 5120), (32, 8, 64, 7168), (1, 2, 8, 4096), (33, 8, 16, 2048),
    (200, 6, 20, 1000),
])  # fmt: skip
def test_route_and_gather_writes_the_routed_rows_in_one_launch_at_decode(
    tokens, top_k, experts, hidden
):
    """``A`` equals ``x[token_of_row]`` and the routing the torch layout; up to 256 routed rows
    (one chunk) the layout's launch writes ``A`` (one kernel in all), beyond it an
    ``index_select`` follows the layout's two launches. Masked ids too: their rows are copied."""
    from torch.profiler import ProfilerActivity, profile

    from pearl_moe.moe import route_and_gather

    ids, weights = _ids(tokens, top_k, experts, "balanced", seed=tokens + hidden)
    ids[0, 0] = -1  # a masked choice
    x = torch.randn(tokens, hidden + 8, device="cuda").bfloat16()[:, 8:]  # its own row stride
    want = route_topk(ids, weights, experts, check=False, kernels=False)
    routing, A = route_and_gather(ids, weights, experts, x, check=False)  # compiles
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        routing, A = route_and_gather(ids, weights, experts, x, check=False)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    assert torch.equal(A, x[want.token_of_row])
    for field in FIELDS:
        assert torch.equal(getattr(want, field), getattr(routing, field)), field
    assert (len(kernels) == 1) == (tokens * top_k <= 256), [e.name for e in kernels]


def test_route_and_gather_replays_in_a_cuda_graph():
    """Captured at decode size (one launch), replayed on new choices and new x in place."""
    from pearl_moe.moe import route_and_gather

    tokens, top_k, experts, hidden = 16, 8, 64, 2048
    ids, weights = _ids(tokens, top_k, experts, "balanced", seed=11)
    x = torch.randn(tokens, hidden, device="cuda").bfloat16()
    route_and_gather(ids, weights, experts, x, check=False)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        routing, A = route_and_gather(ids, weights, experts, x, check=False)
    for seed in (12, 13):
        new_ids, new_weights = _ids(tokens, top_k, experts, "skewed", seed=seed)
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        x.normal_()
        graph.replay()
        want = route_topk(ids, weights, experts, kernels=False)
        assert torch.equal(routing.row_of_slot, want.row_of_slot)
        assert torch.equal(A, x[want.token_of_row])

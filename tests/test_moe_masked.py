"""Masked choices on the CPU: an expert id outside ``[0, experts)`` (vLLM's -1 under expert
parallelism, or an id mapped through an ``expert_map``) adds exactly 0 to its token's output, with
``check=False``, even where the rows no GEMM computes hold NaN (poisoned memory, as the pearl
backend's ``torch.empty`` outputs can)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_moe_layer import expert_weights  # noqa: E402

from pearl_moe.moe import (  # noqa: E402
    MoE,
    combine,
    local_ids,
    moe_forward,
    reference_moe,
    route_topk,
    select_experts,
)
from pearl_moe.moe import layer as moe_layer  # noqa: E402


def _poison(monkeypatch, value):
    """The loop backend's GEMM outputs with every row past the experts' last (the masked
    choices' rows, which no GEMM computes) set to ``value``: as leftover memory would be."""
    loop = moe_layer.grouped

    def poisoned(A, W, offsets, backend, pdl=False):
        out = loop(A, W, offsets, backend, pdl)
        out[int(offsets[-1]) :] = value
        return out

    monkeypatch.setattr(moe_layer, "grouped", poisoned)


def _rel(out, ref):
    return ((out.float() - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)).max().item()


def test_masked_ids_add_exactly_zero_on_poisoned_memory(monkeypatch):
    experts, hidden, inter, tokens, top_k = 6, 64, 32, 24, 3
    w13, w2 = expert_weights(experts, hidden, inter)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    weights, ids = select_experts(torch.randn(tokens, experts, generator=g), top_k)
    masked = ids.clone()
    masked[::2, 0] = -1  # another GPU's expert (vLLM's expert_map gives -1)
    masked[1::4, 2] = experts + 5  # any id past the experts
    masked[3] = -1  # a token with no expert here at all: output 0
    outs = []
    for value in (float("nan"), 1e30):
        _poison(monkeypatch, value)
        outs.append(moe_forward(x, w13, w2, topk_ids=masked, topk_weights=weights,
                                backend="loop", check=False))  # fmt: skip
    assert torch.isfinite(outs[0]).all()
    assert torch.equal(outs[0], outs[1])  # the masked rows are never read
    assert (outs[0][3] == 0).all()
    ref = reference_moe(x, w13, w2, masked, weights)  # masked choices left out
    live = torch.arange(tokens) != 3
    assert _rel(outs[0][live], ref[live]) < 0.02
    # the combine alone: a masked choice's slot is -1 and its row is skipped, the live ones
    # summed in order in float32
    routing = route_topk(masked, weights, experts, check=False)
    assert ((routing.row_of_slot == -1) == ((masked < 0) | (masked >= experts))).all()
    y = torch.randn(routing.rows, hidden).bfloat16()
    y[int(routing.offsets[-1]) :] = float("nan")
    want = torch.zeros(tokens, hidden)
    for t in range(tokens):
        for j in range(top_k):
            if 0 <= masked[t, j] < experts:
                r = routing.row_of_slot[t, j]
                want[t] += routing.weight_of_row[r] * y[r].float()
    got = combine(y, routing, kernels=False)
    assert torch.isfinite(got).all()
    assert torch.allclose(got.float(), want, rtol=2**-7, atol=1e-6)


def test_check_accepts_minus_one_and_refuses_other_ids_out_of_range():
    w13, w2 = expert_weights(4, 32, 16)
    x = torch.randn(3, 32).bfloat16()
    weights, ids = select_experts(torch.randn(3, 4), 2)
    ids[0, 1] = -1
    out = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop")
    assert torch.isfinite(out).all()
    for bad in (-2, 4):
        ids[1, 0] = bad
        with pytest.raises(ValueError, match=f"expert id {bad} is out of range"):
            moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop")
        with pytest.raises(ValueError, match=f"expert id {bad} is out of range"):
            route_topk(ids, weights, 4)


def test_an_expert_map_splits_the_layer_across_gpus(monkeypatch):
    """Two "GPUs", each holding half of eight experts through vLLM's ``expert_map`` (global id
    -> local id, -1 elsewhere): each routes every token over the global experts, computes its
    own, and the two outputs add up to the whole layer's."""
    experts, hidden, inter, tokens, top_k = 8, 64, 32, 20, 3
    w13, w2 = expert_weights(experts, hidden, inter, seed=3)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    logits = torch.randn(tokens, experts, generator=g)
    whole = moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, backend="loop")
    _poison(monkeypatch, float("nan"))
    parts, held = [], ([1, 4, 6, 7], [0, 2, 3, 5])
    for mine in held:
        expert_map = torch.full((experts,), -1)
        expert_map[mine] = torch.arange(len(mine))
        kw = dict(router_logits=logits, top_k=top_k, expert_map=expert_map, backend="loop")
        parts.append(moe_forward(x, w13[mine], w2[mine], check=False, **kw))
        assert torch.equal(parts[-1], moe_forward(x, w13[mine], w2[mine], check=True, **kw))
    assert all(torch.isfinite(p).all() for p in parts)
    total = parts[0].float() + parts[1].float()
    assert _rel(total, whole.float()) < 0.02
    weights, ids = select_experts(logits, top_k)
    assert _rel(total, reference_moe(x, w13, w2, ids, weights)) < 0.02
    # local ids: a global id of an expert elsewhere, or outside the map, is -1
    expert_map = torch.tensor([-1, 0, -1, 1])
    assert local_ids(torch.tensor([[0, 1, 3, 4, -1]]), expert_map).tolist() == [[-1, 0, 1, -1, -1]]
    with pytest.raises(ValueError, match="expert id 9 is out of range: the layer has 8"):
        moe_forward(x, w13[:4], w2[:4], topk_ids=torch.full((tokens, 2), 9),
                    topk_weights=torch.ones(tokens, 2), expert_map=torch.full((8,), -1),
                    backend="loop")  # fmt: skip
    with pytest.raises(ValueError, match="expert_map value 4 is out of range"):
        moe_forward(x, w13[:4], w2[:4], router_logits=logits, top_k=2,
                    expert_map=torch.arange(8) % 5, backend="loop")  # fmt: skip


def test_the_module_under_expert_parallelism():
    """``MoE(..., expert_map=...)`` routes over the global experts and holds the mapped ones: the
    two halves of a layer add up to it."""
    experts, hidden, inter = 8, 32, 16
    w13, w2 = expert_weights(experts, hidden, inter, seed=5)
    router = torch.randn(experts, hidden) * hidden**-0.5
    whole = MoE.from_weights(router, w2, w_gate_up=w13, top_k=2, backend="loop")
    x = torch.randn(4, 3, hidden).bfloat16()
    total = torch.zeros(4, 3, hidden)
    for mine in ([0, 1, 2, 3], [4, 5, 6, 7]):
        expert_map = torch.full((experts,), -1)
        expert_map[mine] = torch.arange(4)
        part = MoE.from_weights(router, w2[mine], w_gate_up=w13[mine], top_k=2, backend="loop",
                                expert_map=expert_map)  # fmt: skip
        assert part.router.weight.shape == (experts, hidden) and part.expert_map.tolist() == (
            expert_map.tolist()
        )
        total += part(x, check=False).float()
    ref = whole(x).float()
    assert ((total - ref).norm(dim=-1) / ref.norm(dim=-1)).max().item() < 0.02

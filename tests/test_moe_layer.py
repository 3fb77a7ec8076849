"""The MoE layer on the CPU (the loop backend): routing metadata, the forward pass against a
float32 reference layer at token level, determinism, and bad input."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.moe import (  # noqa: E402
    MoE,
    moe_forward,
    reference_moe,
    route_topk,
    select_experts,
    torch_composition,
)


def pretend_gpu(monkeypatch, arch):
    """CPU tensors taken for an ``arch`` GPU's (an H200's or a B200's): the pearl backend passes
    and the kernels' own validation runs on them (its device type the tensors')."""
    from pearl_moe.kernels import api, autotune
    from pearl_moe.moe import layer as moe_layer

    monkeypatch.setattr(moe_layer, "_resolve_backend", lambda backend, device: backend)
    monkeypatch.setattr(api, "arch_of", lambda device: arch)
    gpu = "H200" if arch == "sm_90a" else "B200"
    monkeypatch.setattr(autotune, "gpu_name", lambda device=None: gpu)


def expert_weights(experts, hidden, inter, seed=0):
    """``(w_gate_up, w_down)`` bf16 ~ N(0, 1 / fan_in) (also the other CPU layer tests')."""
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) * hidden**-0.5).bfloat16()
    w2 = (torch.randn(experts, hidden, inter, generator=g) * inter**-0.5).bfloat16()
    return w13, w2


def _rel(out, ref):
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _check_layer(x, w13, w2, ids, weights, activation="swiglu"):
    """Ours within 2x torch's own bf16 error of the float32 reference (plus a small floor), every
    token checked: no NaN (the output is a fresh tensor, so a missed token would be garbage)."""
    out = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, activation=activation,
                      backend="loop")  # fmt: skip
    ref = reference_moe(x, w13, w2, ids, weights, activation)
    base = torch_composition(x, w13, w2, ids, weights, activation)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    assert _rel(out, ref) <= 2 * _rel(base, ref) + 1e-3
    per_token = (out.float() - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)
    assert per_token.max().item() < 0.05  # every token, not only on average
    return out


def test_routing_metadata_matches_a_plain_python_sort():
    g = torch.Generator().manual_seed(1)
    tokens, top_k, experts = 11, 3, 9
    # experts 7 and 8 get no token
    ids = torch.stack([torch.randperm(experts - 2, generator=g)[:top_k] for _ in range(tokens)])
    ids[:, 0] = 2  # skewed: expert 2 takes every token's first choice
    weights = torch.rand(tokens, top_k, generator=g)
    r = route_topk(ids, weights, experts)
    flat = [(e, t, j) for t in range(tokens) for j, e in enumerate(ids[t].tolist())]
    order = sorted(range(len(flat)), key=lambda i: (flat[i][0], i))  # stable by expert
    assert r.token_of_row.tolist() == [flat[i][1] for i in order]
    counts = [sum(1 for e, _, _ in flat if e == x) for x in range(experts)]
    assert r.counts.tolist() == counts and 0 in counts  # some expert has no tokens
    assert r.offsets.tolist() == torch.tensor(counts).cumsum(0).tolist()
    for t in range(tokens):
        for j in range(top_k):
            row = r.row_of_slot[t, j].item()
            assert r.token_of_row[row].item() == t
            assert r.weight_of_row[row].item() == pytest.approx(weights[t, j].item())
    assert (r.tokens, r.top_k, r.experts, r.rows) == (tokens, top_k, experts, tokens * top_k)


def test_select_experts_is_softmax_top_k_renormalized():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    w, ids = select_experts(logits, 2)
    assert ids.tolist() == [[3, 2]]
    assert w.sum().item() == pytest.approx(1.0)
    raw, _ = select_experts(logits, 2, renormalize=False)
    assert raw[0, 0].item() == pytest.approx(torch.softmax(logits, -1)[0, 3].item())
    with pytest.raises(ValueError, match="top_k"):
        select_experts(logits, 5)


@pytest.mark.parametrize(
    "tokens, experts, top_k, skew",
    [
        (16, 8, 2, False),  # balanced-ish random routing
        (24, 8, 2, True),  # skewed: two experts take most rows
        (3, 16, 2, False),  # most experts get no token
        (12, 6, 1, False),  # top-1
        (1, 4, 4, False),  # one token, every expert
    ],
)
def test_the_layer_matches_the_float32_reference_token_by_token(tokens, experts, top_k, skew):
    hidden, inter = 64, 48
    w13, w2 = expert_weights(experts, hidden, inter, seed=tokens)
    g = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    logits = torch.randn(tokens, experts, generator=g)
    if skew:
        logits[:, :2] += 4.0
    weights, ids = select_experts(logits, top_k)
    _check_layer(x, w13, w2, ids, weights)
    out = moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, backend="loop")
    assert torch.equal(out, moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights,
                                        backend="loop"))  # fmt: skip


def test_geglu_and_unnormalized_weights():
    w13, w2 = expert_weights(5, 32, 16)
    x = torch.randn(7, 32).bfloat16()
    weights, ids = select_experts(torch.randn(7, 5), 2, renormalize=False)
    _check_layer(x, w13, w2, ids, weights, activation="geglu")


def test_the_combine_is_deterministic_and_zero_tokens_give_an_empty_output():
    w13, w2 = expert_weights(8, 64, 32)
    x = torch.randn(32, 64).bfloat16()
    weights, ids = select_experts(torch.randn(32, 8), 3)
    runs = [moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop")
            for _ in range(3)]  # fmt: skip
    assert all(torch.equal(runs[0], r) for r in runs[1:])
    empty = moe_forward(x[:0], w13, w2, topk_ids=ids[:0], topk_weights=weights[:0])
    assert empty.shape == (0, 64)


def test_the_module_from_a_checkpoints_tensors():
    experts, hidden, inter = 6, 32, 24
    w13, w2 = expert_weights(experts, hidden, inter)
    router = torch.randn(experts, hidden) * hidden**-0.5
    gate, up = w13[:, :inter], w13[:, inter:]
    a = MoE.from_weights(router, w2, w_gate=gate, w_up=up, top_k=2, backend="loop")
    b = MoE.from_weights(router, w2, w_gate_up=w13, top_k=2, backend="loop")
    # a checkpoint's list of per-expert matrices (transformers 4's expert MLPs)
    c = MoE.from_weights(router, list(w2), w_gate=list(gate), w_up=list(up), top_k=2,
                         backend="loop")  # fmt: skip
    assert b.w_gate_up.data_ptr() == w13.data_ptr()  # held, not copied
    assert torch.equal(a.w_gate_up, w13) and torch.equal(c.w_gate_up, w13)
    x = torch.randn(2, 5, hidden).bfloat16()  # (batch, sequence, hidden)
    ya, yb, yc = a(x), b(x), c(x)
    assert ya.shape == x.shape and torch.equal(ya, yb) and torch.equal(ya, yc)
    # the router in the model's dtype: a bf16 linear, as the Hugging Face blocks compute it
    assert a.router.weight.dtype == torch.bfloat16
    logits = torch.nn.functional.linear(x.reshape(-1, hidden), router.bfloat16())
    weights, ids = select_experts(logits, 2)
    assert torch.equal(a.route(x.reshape(-1, hidden))[2], ids)
    ref = reference_moe(x.reshape(-1, hidden), w13, w2, ids, weights)
    assert _rel(ya.reshape(-1, hidden), ref) < 0.02
    fresh = MoE(hidden, inter, experts, top_k=2)
    assert fresh.w_gate_up.shape == (experts, 2 * inter, hidden)
    assert not any(p.requires_grad for p in fresh.parameters())
    assert fresh.w_gate_up.float().std().item() == pytest.approx(hidden**-0.5, rel=0.1)
    with pytest.raises(TypeError):  # after top_k every argument is named
        MoE(hidden, inter, experts, 2, "swiglu")


def test_bad_input_is_a_clear_error_before_any_work():
    w13, w2 = expert_weights(4, 32, 16)
    x = torch.randn(5, 32).bfloat16()
    weights, ids = select_experts(torch.randn(5, 4), 2)

    def run(**changes):
        args = dict(x=x, w_gate_up=w13, w_down=w2, topk_ids=ids, topk_weights=weights)
        args.update(changes)
        moe_forward(args.pop("x"), args.pop("w_gate_up"), args.pop("w_down"), **args)

    cases = {
        "must be bfloat16": dict(x=x.float()),
        "hidden size 32 differs": dict(x=torch.randn(5, 16).bfloat16()),
        "w_down must be": dict(w_down=w2[:, :, :8]),
        "even count": dict(w_gate_up=w13[:, :31]),
        "expert id 7 is out of range": dict(topk_ids=ids.clone().fill_(7)),
        "expert id -2 is out of range": dict(topk_ids=ids.clone().fill_(-2)),
        "either router_logits": dict(router_logits=torch.randn(5, 4), top_k=2),
        "topk_ids has 4 tokens": dict(topk_ids=ids[:4], topk_weights=weights[:4]),
        "topk_weights must be": dict(topk_weights=weights[:, :1]),
        "activation": dict(activation="relu"),
        "backend": dict(backend="cutlass"),
        "needs tensors on a CUDA GPU": dict(backend="pearl"),
    }
    for message, change in cases.items():
        with pytest.raises(ValueError, match=message):
            run(**change)
    with pytest.raises(ValueError, match="top_k"):
        moe_forward(x, w13, w2, router_logits=torch.randn(5, 4), top_k=5)
    with pytest.raises(ValueError, match="router_logits must be"):
        moe_forward(x, w13, w2, router_logits=torch.randn(5, 3), top_k=2)
    with pytest.raises(ValueError, match="top_k"):
        MoE(32, 16, 4, top_k=5)
    with pytest.raises(ValueError, match="w_gate and w_up must both be"):
        MoE.from_weights(torch.randn(4, 32), w2, w_gate=w13[:, :16], top_k=2)
    with pytest.raises(ValueError, match="either w_gate_up or both"):
        MoE.from_weights(torch.randn(4, 32), w2, top_k=2)
    # unchecked (as in a CUDA graph), an id out of range belongs to no expert: no row reads it
    r = route_topk(ids.clone().fill_(9), weights, 4, check=False)
    assert r.counts.tolist() == [0, 0, 0, 0] and (r.row_of_slot == -1).all()


def test_the_package_exports_the_layer_without_importing_torch_up_front():
    import subprocess
    import sys

    code = "import sys, pearl_moe; assert 'torch' not in sys.modules; print(pearl_moe.MoE.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "MoE"


def test_the_interleaved_gate_up_layout_gives_the_same_layer():
    from pearl_moe.kernels import interleave_gate_up

    w13, w2 = expert_weights(4, 32, 24)
    x = torch.randn(9, 32).bfloat16()
    weights, ids = select_experts(torch.randn(9, 4), 2)
    concat = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop")
    inter = moe_forward(x, interleave_gate_up(w13), w2, topk_ids=ids, topk_weights=weights,
                        backend="loop", gate_up_layout="interleaved")  # fmt: skip
    assert torch.equal(concat, inter)  # the same products, the same order: the same bits
    router = torch.randn(4, 32)
    a = MoE.from_weights(router, w2, w_gate_up=w13, top_k=2, backend="loop")
    b = MoE.from_weights(router, w2, w_gate_up=w13, top_k=2, backend="loop",
                         gate_up_layout="interleaved")  # fmt: skip
    assert torch.equal(a(x), b(x)) and not torch.equal(a.w_gate_up, b.w_gate_up)
    with pytest.raises(ValueError, match="gate_up_layout"):
        moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, gate_up_layout="packed")


def test_the_in_kernel_gather_passes_x_and_the_index_to_the_gate_up_kernel(monkeypatch):
    """``gather="kernel"`` hands the gate+up GEMM ``x`` itself and the routing's gather index
    (int32) instead of the gathered copy, and gives the same layer; it needs the pearl backend.
    (The pearl kernels are stood in for by the loop on the CPU: what is checked is the call.)"""
    import pearl_moe.kernels as kernels
    from pearl_moe.moe import layer as moe_layer

    w13, w2 = expert_weights(4, 32, 16)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(3)).bfloat16()
    weights, ids = select_experts(torch.randn(5, 4, generator=torch.Generator().manual_seed(4)), 2)
    with pytest.raises(ValueError, match="gather must be one of"):
        moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop", gather="tma")
    with pytest.raises(ValueError, match="needs gather='copy'"):
        moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop",
                    gather="kernel")  # fmt: skip
    seen = {}
    loop = moe_layer.grouped

    def fake_gemm(A, W, offsets, check=True, activation=None, a_index=None, pdl=False):
        seen.update(A=A, a_index=a_index, activation=activation, pdl=pdl)
        return loop(A.index_select(0, a_index.long()), W, offsets, "loop")

    monkeypatch.setattr(kernels, "grouped_gemm", fake_gemm)
    monkeypatch.setattr(
        moe_layer, "grouped", lambda A, W, o, backend, pdl=False: loop(A, W, o, "loop")
    )
    pretend_gpu(monkeypatch, "sm_90a")
    out = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="pearl",
                      gather="kernel")  # fmt: skip
    assert seen["A"] is x and seen["a_index"].dtype == torch.int32 and seen["activation"] is None
    assert seen["pdl"] is True  # on sm_90a the GEMMs are programmatic dependent launches
    ref = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop")
    assert torch.equal(out, ref)


class Launches:
    """Records every tensor operation run while active (through a ``TorchDispatchMode``; only the
    factories of uninitialised memory are left out: they launch nothing), and every call of the
    grouped GEMM and of the glue kernels, which the test stands in for."""

    FREE = {"empty.memory_format", "new_empty.default", "empty_strided.default"}

    def __init__(self, monkeypatch):
        import pearl_moe.kernels as kernels
        from pearl_moe.moe import glue_kernels
        from pearl_moe.moe import layer as moe_layer

        self.ops, self.calls = [], []
        loop = moe_layer.grouped

        def gemm(A, W, offsets, check=True, activation=None, a_index=None, pdl=False):
            self.calls.append("grouped_gemm")
            A = A if a_index is None else A.index_select(0, a_index.long())
            h = loop(A, W, offsets, "loop")
            if activation is None:
                return h
            return moe_layer.gated(h, activation, "interleaved").bfloat16()

        monkeypatch.setattr(kernels, "grouped_gemm", gemm)
        monkeypatch.setattr(moe_layer, "grouped", lambda A, W, o, b, pdl=False: gemm(A, W, o))
        for name in ("route_rows", "combine_rows"):
            monkeypatch.setattr(glue_kernels, name, lambda *a, n=name: self.calls.append(n))

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        ops, free = self.ops, self.FREE

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.__name__ not in free:
                    ops.append(func.__name__)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_kernels_are_asked_before_anything_launches(monkeypatch, arch):
    """With the pearl backend every problem the kernels would find (hidden or intermediate not a
    multiple of 8, a non-contiguous weight, the in-kernel gather off sm_90a) is a ValueError
    before any tensor operation or kernel runs: the kernels' own validation is asked first. A
    good call through the same recorder runs the routing, both GEMMs and the combine."""
    from pearl_moe.kernels import interleave_gate_up

    pretend_gpu(monkeypatch, arch)
    x = torch.randn(6, 64).bfloat16()
    logits = torch.randn(6, 4)
    w13, w2 = expert_weights(4, 64, 32)
    odd13, odd2 = expert_weights(4, 64, 100)  # intermediate 100: the down GEMM's k
    narrow = torch.randn(6, 100).bfloat16()
    w13_narrow, w2_narrow = expert_weights(4, 100, 32)  # hidden 100: the gate+up GEMM's k
    strided = w2.transpose(1, 2).contiguous().transpose(1, 2)  # w_down's shape, not contiguous
    cases = [
        ("not a multiple of 8", x, odd13, odd2, {}),
        ("not a multiple of 8", narrow, w13_narrow, w2_narrow, {}),
        ("must be contiguous", x, w13, strided, {}),
        ("must be contiguous", x.t().contiguous().t(), w13, w2, dict(gather="kernel")),
    ]
    if arch == "sm_100a":
        cases.append(("sm_90a kernels only", x, w13, w2, dict(gather="kernel")))
    with Launches(monkeypatch) as rec:
        for message, xs, a, b, extra in cases:
            with pytest.raises(ValueError, match=message):
                moe_forward(xs, a, b, router_logits=logits, top_k=2, backend="pearl", **extra)
            layer = MoE.from_weights(torch.randn(4, xs.shape[1]), b, w_gate_up=a, top_k=2,
                                     backend="pearl")  # fmt: skip
            del rec.ops[:]  # building the layer is not the forward
            if message == "not a multiple of 8":  # (from_weights makes weights contiguous)
                with pytest.raises(ValueError, match=message):
                    layer(xs)
        assert rec.ops == [] and rec.calls == []
        # the control: a good call launches routing, gather, two GEMMs and the combine
        fused = interleave_gate_up(w13)
        out = moe_forward(x, fused, w2, router_logits=logits, top_k=2, backend="pearl",
                          gate_up_layout="interleaved")  # fmt: skip
    assert rec.calls == ["grouped_gemm"] * 2
    assert {"_softmax.default", "topk.default", "index_select.default"} <= set(rec.ops)
    weights, ids = select_experts(logits, 2)
    assert _rel(out, reference_moe(x, w13, w2, ids, weights)) < 0.02


def test_contradictory_arguments_are_refused_before_any_work(monkeypatch):
    """router_logits with topk_weights, a top_k other than topk_ids' width, router_logits of the
    wrong width (global experts with an expert_map): refused, nothing run."""
    w13, w2 = expert_weights(4, 32, 16)
    x = torch.randn(5, 32).bfloat16()
    logits = torch.randn(5, 4)
    weights, ids = select_experts(logits, 2)
    expert_map = torch.tensor([0, -1, 1, 2, 3, -1])
    cases = {
        "topk_weights come with topk_ids": dict(router_logits=logits, top_k=2,
                                                topk_weights=weights),
        "top_k=3 contradicts": dict(topk_ids=ids, topk_weights=weights, top_k=3),
        "router_logits need top_k": dict(router_logits=logits),
        "router_logits must be \\(tokens, experts\\) = \\(5, 6\\)": dict(
            router_logits=logits, top_k=2, expert_map=expert_map),
        "expert_map must be": dict(topk_ids=ids, topk_weights=weights,
                                   expert_map=expert_map.float()),
        "topk_ids need topk_weights": dict(topk_ids=ids),
        "renormalize applies to router_logits": dict(topk_ids=ids, topk_weights=weights,
                                                     renormalize=False),
        "top_k >= 1": dict(topk_ids=ids[:, :0], topk_weights=weights[:, :0]),
    }  # fmt: skip
    layer = MoE.from_weights(torch.randn(4, 32), w2, w_gate_up=w13, top_k=2, backend="loop")
    wrong = torch.randn(5, 31).bfloat16()
    with Launches(monkeypatch) as rec:
        for message, args in cases.items():
            with pytest.raises(ValueError, match=message):
                moe_forward(x, w13, w2, backend="loop", **args)
        with pytest.raises(ValueError, match=r"x must be \(\.\.\., 32\)"):
            layer(wrong)
    assert rec.ops == [] and rec.calls == []
    # consistent arguments run: top_k equal to topk_ids' width is accepted
    out = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, top_k=2, backend="loop")
    assert torch.equal(out, moe_forward(x, w13, w2, router_logits=logits, top_k=2,
                                        backend="loop"))  # fmt: skip


def test_a_layer_that_could_never_route_or_run_is_refused_when_built():
    """The routing's groups, the shared experts' arguments, the interleaved layout's rows and the
    expert map's values are checked when the layer is built, not at its first call."""
    w13, w2 = expert_weights(4, 32, 16)
    router = torch.randn(4, 32)
    cases = {
        "n_group must divide": lambda: MoE(32, 16, 8, 2, n_group=3),
        "topk_group must pick": lambda: MoE(32, 16, 8, 2, n_group=4, topk_group=9),
        r"topk_group=5 needs groups": lambda: MoE(32, 16, 8, 2, topk_group=5),
        "give shared_intermediate": lambda: MoE(32, 16, 8, 2, shared_gate=True),
        "intermediate % 8": lambda: MoE(32, 12, 8, 2, gate_up_layout="interleaved"),
        "expert_map value 5": lambda: MoE(32, 16, 2, 1, expert_map=[0, 1, 5]),
        "give shared_gate_up": lambda: MoE.from_weights(
            router, w2, w_gate_up=w13, top_k=2, shared_down=torch.randn(32, 8).bfloat16()),
        "expert_map value 7": lambda: MoE.from_weights(
            torch.randn(5, 32), w2, w_gate_up=w13, top_k=2, expert_map=[0, 1, 2, 3, 7]),
    }  # fmt: skip
    for message, build in cases.items():
        with pytest.raises(ValueError, match=message):
            build()
    # the same arguments, consistent, build
    MoE(32, 16, 8, 2, n_group=4, topk_group=2)
    MoE.from_weights(torch.randn(5, 32), w2, w_gate_up=w13, top_k=2, expert_map=[0, 1, 2, 3, -1])


def test_the_forward_launches_programmatically_at_decode_only_by_default(monkeypatch):
    """``pdl=None``: programmatic dependent launches with the pearl backend on sm_90a (where they
    were measured) up to ``PDL_MAX_ROWS`` routed rows (decode, one routing launch), not beyond,
    not on sm_100a unless asked, never on the other backends; ``pdl=True`` elsewhere than the
    pearl backend, or a non-bool, is refused."""
    from pearl_moe.moe import layer as moe_layer

    limit = moe_layer.PDL_MAX_ROWS
    assert limit == 256
    pretend_gpu(monkeypatch, "sm_90a")
    assert moe_layer.programmatic_launches(None, "pearl", limit)
    assert not moe_layer.programmatic_launches(None, "pearl", limit + 1)
    assert moe_layer.programmatic_launches(True, "pearl", 10 * limit)
    assert not moe_layer.programmatic_launches(False, "pearl", 1)
    assert not moe_layer.programmatic_launches(None, "loop", 1)
    pretend_gpu(monkeypatch, "sm_100a")
    assert not moe_layer.programmatic_launches(None, "pearl", 1)
    assert moe_layer.programmatic_launches(True, "pearl", 1)
    with pytest.raises(ValueError, match="pearl backend"):
        moe_layer.programmatic_launches(True, "torch", 1)
    with pytest.raises(ValueError, match="pdl must be None, True or False"):
        moe_layer.programmatic_launches(1, "pearl", 1)
    # moe_forward refuses them before anything runs
    w13, w2 = expert_weights(4, 32, 16)
    x = torch.randn(3, 32).bfloat16()
    weights, ids = select_experts(torch.randn(3, 4), 2)
    for bad, match in ((1, "pdl must be None, True or False"), (True, "pearl backend")):
        with pytest.raises(ValueError, match=match):
            moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="loop", pdl=bad)

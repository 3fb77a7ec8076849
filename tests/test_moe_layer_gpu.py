"""The MoE layer on the GPU with this package's grouped GEMMs (``pytest -m gpu``), on Hopper
(sm_90) and Blackwell (sm_100): against the float32 reference layer token by token, with skewed
routing, experts without tokens and top-1; no host sync with ``check=False`` (one with
``check=True``), and the whole forward captured in a CUDA graph; masked choices (expert
parallelism) on NaN-poisoned memory, eager and in a graph replayed on new routing; Hugging Face
blocks converted; the layer under ``torch.compile``. The in-kernel gather is sm_90a's alone: on
sm_100 it is refused with a ValueError."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

MAJOR = torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        MAJOR not in (9, 10), reason="needs a Hopper (sm_90) or Blackwell (sm_100) GPU"
    ),
]
#: The in-kernel gather of x (``gather="kernel"``) is implemented by the sm_90a kernels only.
GATHERS = MAJOR == 9

from pearl_moe.kernels import interleave_gate_up  # noqa: E402
from pearl_moe.moe import layer as moe_layer  # noqa: E402
from pearl_moe.moe import (  # noqa: E402
    local_ids,
    moe_forward,
    reference_moe,
    select_experts,
    torch_composition,
)

#: Qwen3-30B-A3B's expert shapes under EP=8 (16 local experts, top-8), and a top-1 layer.
LAYERS = {"qwen3-30b-ep8": (2048, 768, 16, 8), "top1": (1024, 512, 8, 1)}
#: The layer benchmark's implementations that run in this environment (SonicMoE, the fifth, runs
#: in its own: ``scripts/layer_runs.sh sonic``).
IMPLS = ("pearl", "pearl-fused", "pearl-serial", "pearl-gather", "torch", "quack")
#: Those that run on this GPU (pearl-gather reads x through the index inside sm_90a's kernels).
HERE = tuple(n for n in IMPLS if GATHERS or n != "pearl-gather")


def _layer(hidden, inter, experts, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=g, device="cuda") * hidden**-0.5
    w2 = torch.randn(experts, hidden, inter, generator=g, device="cuda") * inter**-0.5
    return w13.bfloat16(), w2.bfloat16()


def _rel(out, ref):
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("tokens, routing", [(1, "random"), (16, "skewed"), (64, "random"),
                                             (200, "skewed")])  # fmt: skip
def test_the_layer_on_our_kernels_matches_the_reference(layer, tokens, routing):
    hidden, inter, experts, top_k = LAYERS[layer]
    w13, w2 = _layer(hidden, inter, experts, seed=tokens)
    g = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=g, device="cuda").bfloat16()
    logits = torch.randn(tokens, experts, generator=g, device="cuda")
    if routing == "skewed":
        logits[:, : max(1, top_k // 2)] += 5.0  # a few experts take most rows, others none
    weights, ids = select_experts(logits, top_k)
    ref = reference_moe(x, w13, w2, ids, weights)
    base = torch_composition(x, w13, w2, ids, weights)
    unfused = moe_forward(x, w13, w2, topk_ids=ids, topk_weights=weights, backend="pearl")
    # the activation fused into the gate+up kernel's epilogue (weights in its interleaved layout)
    fused = moe_forward(x, interleave_gate_up(w13), w2, topk_ids=ids, topk_weights=weights,
                        backend="pearl", gate_up_layout="interleaved")  # fmt: skip
    # x's rows read through the gather index by the gate+up kernel, unfused and fused
    gathered = [
        moe_forward(x, w, w2, topk_ids=ids, topk_weights=weights, backend="pearl",
                    gate_up_layout=layout, gather="kernel")
        for w, layout in ((w13, "concat"), (interleave_gate_up(w13), "interleaved"))
        if GATHERS
    ]  # fmt: skip
    for out in (unfused, fused, *gathered):
        assert torch.isfinite(out).all()
        assert _rel(out, ref) <= 2 * _rel(base, ref) + 1e-3, (_rel(out, ref), _rel(base, ref))
        per_token = (out.float() - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)
        assert per_token.max().item() < 0.05


@pytest.mark.parametrize("tokens", [1, 64])
def test_interleaved_weights_left_unfused_by_the_table_match_the_reference(tokens, monkeypatch):
    """Where ``autotune.fuse_activation`` says no (on the H200: DeepSeek V4 Pro at 1 token), the
    interleaved layer runs the plain gate+up GEMM and the activation on the interleaved layout."""
    import pearl_moe.moe.layer as layer_module

    hidden, inter, experts, top_k = LAYERS["qwen3-30b-ep8"]
    w13, w2 = _layer(hidden, inter, experts, seed=7)
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(tokens, hidden, generator=g, device="cuda").bfloat16()
    weights, ids = select_experts(torch.randn(tokens, experts, generator=g, device="cuda"), top_k)
    ref = reference_moe(x, w13, w2, ids, weights)
    base = torch_composition(x, w13, w2, ids, weights)
    asked = []
    monkeypatch.setattr(layer_module, "fuses_activation", lambda *a: asked.append(a) or False)
    out = moe_forward(x, interleave_gate_up(w13), w2, topk_ids=ids, topk_weights=weights,
                      backend="pearl", gate_up_layout="interleaved")  # fmt: skip
    assert asked and torch.isfinite(out).all()
    assert _rel(out, ref) <= 2 * _rel(base, ref) + 1e-3


def test_the_forward_needs_no_host_sync_and_replays_in_a_cuda_graph():
    hidden, inter, experts, top_k = LAYERS["qwen3-30b-ep8"]
    w13, w2 = _layer(hidden, inter, experts)
    x = torch.randn(64, hidden, device="cuda").bfloat16()
    logits = torch.randn(64, experts, device="cuda")

    def forward():
        return moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, backend="pearl",
                           check=False)  # fmt: skip

    eager = forward()  # compiles the kernels (loading them may touch the host)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = forward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(eager, again)  # deterministic, and no sync on the way
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = forward()
    x.copy_(torch.randn_like(x))
    logits.copy_(torch.randn_like(logits))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, forward())


@pytest.mark.parametrize("tokens", [1, 16, 256])
def test_programmatic_launches_replay_on_new_routing_as_the_serial_forward(tokens, monkeypatch):
    """The forward with ``pdl=True`` (the default on sm_90a up to 256 routed rows) launches both
    GEMMs with ``pdl`` (checked on the configs compiled; the combine too, and the routing lets
    the gate+up GEMM launch at once); captured in a CUDA graph whose memory pool a NaN-filling
    graph shares (large and small blocks), replayed on new x and logits: every replay gives the bits of
    the serial forward (``pdl=False``) on the same inputs, within the float32 layer's tolerance.
    A GEMM or combine that read its input (the routing's gathered copy, the gate+up output, the
    down output) before the kernel writing it had finished would read NaN or the previous
    replay's rows."""
    from pearl_moe.kernels import api

    hidden, inter, experts, top_k = LAYERS["qwen3-30b-ep8"]
    w13, w2 = _layer(hidden, inter, experts, seed=21)
    w = interleave_gate_up(w13)
    g = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=g, device="cuda").bfloat16()
    logits = torch.randn(tokens, experts, generator=g, device="cuda")

    def forward(pdl=None):
        return moe_forward(x, w, w2, router_logits=logits, top_k=top_k, backend="pearl",
                           check=False, gate_up_layout="interleaved", pdl=pdl)  # fmt: skip

    compiled = []
    real = api.compiled_kernel
    monkeypatch.setattr(api, "compiled_kernel",
                        lambda *a: compiled.append(a[2]) or real(*a))  # fmt: skip
    forward(False)
    forward(True)  # compile both outside the capture
    assert [c.pdl for c in compiled] == [False, False, True, True]
    torch.cuda.synchronize()
    pool = torch.cuda.graph_pool_handle()
    poison = torch.cuda.CUDAGraph()
    with torch.cuda.graph(poison, pool=pool):
        # the large blocks, and the small ones (up to 1 MiB, a pool of their own) the routing's
        # buffers at decode come from
        junk = [torch.full((64 << 20,), float("nan"), dtype=torch.bfloat16, device="cuda")]
        junk += [
            torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda")
            for n in (64, 256, 1024, 4096, 16384, 65536, 262144, 524288)
            for _ in range(4)
        ]
    del junk
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = forward(True)
    for _ in range(3):
        x.copy_(torch.randn(x.shape, generator=g, device="cuda"))
        logits.copy_(torch.randn(logits.shape, generator=g, device="cuda"))
        poison.replay()
        graph.replay()
        torch.cuda.synchronize()
        serial = forward(False)
        assert torch.equal(out, serial)
        weights, ids = select_experts(logits, top_k)
        ref = reference_moe(x, w13, w2, ids, weights)
        base = torch_composition(x, w13, w2, ids, weights)
        assert torch.isfinite(out).all()
        assert _rel(out, ref) <= 2 * _rel(base, ref) + 1e-3


def test_the_layer_bench_checks_every_implementation():
    """Every implementation of the layer benchmark passes the check against the float32 layer on
    one fresh input set (eager; the CUDA-graph timing runs in the test below)."""
    from pearl_moe.bench.layer import LayerProblem, check_layer, layer_impl

    problem = LayerProblem("Qwen3-30B-A3B", 16)
    impls = {n: layer_impl(n) for n in HERE}
    checks = check_layer(impls, problem)
    for name in HERE:
        if name == "quack" and checks[name][0] is None:
            continue  # quack is not installed here
        assert checks[name][0] is True, (name, checks[name])


@pytest.mark.parametrize("name", HERE)
def test_the_layer_bench_times_each_implementation_in_its_own_process(name, tmp_path):
    """``python -m pearl_moe layer`` end to end for one implementation: checked, captured in CUDA
    graphs, timed in rounds, outputs checked after the replays. Each runs in a process of its own,
    so a kernel fault there is reported with the implementation's name and cannot take this
    process's CUDA context (and every later test) with it."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "layer.json"
    cmd = [sys.executable, "-m", "pearl_moe", "layer", "--models", "Qwen3-30B-A3B",
           "--tokens", "16", "--skewed-tokens", "", "--impls", name, "--rounds", "2",
           "--reps", "2", "--out", str(out),
           # with our forward, also where its time goes: every step in a graph of its own
           "--steps-tokens", "16" if name == "pearl" else ""]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    run = json.loads(out.read_text())
    records = [r for r in run["records"] if r["impl"] == name]
    if name == "pearl":
        from pearl_moe.bench.layer import STEPS

        steps = {r["impl"]: r for r in run["records"] if r["impl"].startswith("step:")}
        assert set(steps) == {f"step:{s}" for s in STEPS}
        assert all(r["status"] == "ok" and r["time"]["median_us"] > 0 for r in steps.values())
    if name == "quack" and records and records[0]["status"] == "unavailable":
        pytest.skip("quack is not installed here")
    assert records and all(r["status"] == "ok" for r in records), records
    assert all(r["time"]["median_us"] > 0 for r in records)


def test_the_layer_bench_times_a_converted_weight_beside_another_implementation(tmp_path):
    """pearl-fused converts its weight when it is prepared; timed with torch after it, that copy
    must live until pearl-fused's graph is replayed (the next capture empties the allocator's
    cache, and a freed weight was unmapped: the replays faulted). A process of its own, as above."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "layer.json"
    cmd = [sys.executable, "-m", "pearl_moe", "layer", "--models", "Qwen3-30B-A3B",
           "--tokens", "16", "--skewed-tokens", "", "--impls", "pearl-fused,torch", "--rounds",
           "2", "--reps", "2", "--steps-tokens", "", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    records = json.loads(out.read_text())["records"]
    assert {r["impl"] for r in records} == {"pearl-fused", "torch"}
    assert all(r["status"] == "ok" and r["time"]["median_us"] > 0 for r in records), records


@pytest.mark.skipif(GATHERS, reason="sm_90a runs the in-kernel gather")
def test_the_in_kernel_gather_is_refused_off_sm90a():
    """On sm_100 ``gather="kernel"`` is a ValueError before anything runs (the kernels' own
    validation says the gather is sm_90a's), for the function and the explicit backend alike."""
    hidden, inter, experts, top_k = LAYERS["top1"]
    w13, w2 = _layer(hidden, inter, experts)
    x = torch.randn(4, hidden, device="cuda").bfloat16()
    logits = torch.randn(4, experts, device="cuda")
    for backend in ("pearl", "auto"):
        with pytest.raises(ValueError, match="sm_90a"):
            moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, backend=backend,
                        gather="kernel")  # fmt: skip


def test_check_true_syncs_once_and_check_false_never():
    """``check=True`` reads the expert ids' range back to the host: one synchronizing call;
    ``check=False``: none (what the docstrings promise)."""
    import warnings

    hidden, inter, experts, top_k = LAYERS["qwen3-30b-ep8"]
    w13, w2 = _layer(hidden, inter, experts)
    x = torch.randn(16, hidden, device="cuda").bfloat16()
    logits = torch.randn(16, experts, device="cuda")
    moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, backend="pearl")  # compile
    torch.cuda.synchronize()
    syncs = {}
    for check in (True, False):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, backend="pearl",
                            check=check)  # fmt: skip
        finally:
            torch.cuda.set_sync_debug_mode("default")
        syncs[check] = sum("synchroniz" in str(w.message) for w in caught)
    assert syncs == {True: 1, False: 0}


def _spy_on_the_combine(monkeypatch):
    """Record, for every combine the layer runs, which rows of the down GEMM's output hold NaN (a
    device tensor: captured with the rest in a CUDA graph)."""
    seen = {}
    real = moe_layer.combine

    def spy(y, routing, kernels=None, pdl=False):
        seen["nan_rows"] = torch.isnan(y).any(dim=1)
        return real(y, routing, kernels, pdl)

    monkeypatch.setattr(moe_layer, "combine", spy)
    return seen


def _masked_problem(seed):
    """Qwen3-30B-A3B's experts split over two GPUs: 32 global experts, this one holding 16 through
    an ``expert_map`` (the others -1), 64 tokens at top-8 routed over all 32."""
    hidden, inter, local, top_k = LAYERS["qwen3-30b-ep8"]
    w13, w2 = _layer(hidden, inter, local, seed=seed)
    expert_map = torch.full((2 * local,), -1, device="cuda")
    expert_map[1::2] = torch.arange(local, device="cuda")  # the odd experts are here
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(64, hidden, generator=g, device="cuda").bfloat16()
    logits = torch.randn(64, 2 * local, generator=g, device="cuda")
    return x, logits, w13, w2, expert_map, top_k


def _check_masked(out, x, logits, w13, w2, expert_map, top_k, nan_rows, routing):
    weights, ids = select_experts(logits, top_k)
    local = local_ids(ids, expert_map)
    assert (local == -1).any(dim=1).all()  # every token has choices held elsewhere
    valid = int(routing.offsets[-1])
    # the poison is in the rows past the experts' (which the masked choices' slots would read:
    # a combine that read them would give NaN; the kernels may store into some of these rows as
    # a tile of the last expert runs past its end), and in no computed row
    assert valid < routing.rows and nan_rows[valid:].any()
    assert not nan_rows[:valid].any()
    assert torch.isfinite(out).all()
    ref = reference_moe(x, w13, w2, local, weights)  # the masked choices left out
    per_token = (out.float() - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)
    assert per_token.max().item() < 0.05


def test_masked_choices_add_zero_on_a_nan_poisoned_allocator(monkeypatch):
    """Eager, ``check=False``: the caching allocator's free blocks are filled with NaN first, and
    again just before the down GEMM allocates its output (a block of that size filled and freed:
    the output takes it), so the rows that no expert computes (the masked choices') hold NaN; the
    output is finite and matches the reference without those choices."""
    x, logits, w13, w2, expert_map, top_k = _masked_problem(seed=11)
    kw = dict(router_logits=logits, top_k=top_k, expert_map=expert_map, backend="pearl",
              check=False, return_routing=True)  # fmt: skip
    moe_forward(x, w13, w2, **kw)  # compile outside the measurement
    seen = _spy_on_the_combine(monkeypatch)
    real = moe_layer.grouped

    def poisoned(A, W, offsets, backend, pdl=False):
        if W is w2:
            junk = torch.full((A.shape[0], W.shape[1]), float("nan"), dtype=A.dtype, device="cuda")
            del junk
        return real(A, W, offsets, backend, pdl)

    monkeypatch.setattr(moe_layer, "grouped", poisoned)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    junk = torch.full((64 << 20,), float("nan"), dtype=torch.bfloat16, device="cuda")  # 128 MiB
    del junk  # its blocks stay in the allocator's cache, NaN
    out, routing = moe_forward(x, w13, w2, **kw)
    torch.cuda.synchronize()
    _check_masked(out, x, logits, w13, w2, expert_map, top_k, seen["nan_rows"], routing)


def test_masked_choices_add_zero_in_a_cuda_graph_replayed_on_new_routing(monkeypatch):
    """The forward captured in a CUDA graph whose memory pool a NaN-filling graph shares (replayed
    before each replay of the forward: every buffer of the forward starts as NaN); new logits
    written between replays move the masked choices. Each replay: finite output, equal to the
    eager forward on the same inputs, within the reference's tolerance."""
    x, logits, w13, w2, expert_map, top_k = _masked_problem(seed=12)

    def forward():
        return moe_forward(x, w13, w2, router_logits=logits, top_k=top_k, expert_map=expert_map,
                           backend="pearl", check=False, return_routing=True)  # fmt: skip

    forward()  # compile outside the capture
    seen = _spy_on_the_combine(monkeypatch)
    torch.cuda.synchronize()
    pool = torch.cuda.graph_pool_handle()
    poison = torch.cuda.CUDAGraph()
    with torch.cuda.graph(poison, pool=pool):
        junk = torch.full((64 << 20,), float("nan"), dtype=torch.bfloat16, device="cuda")
    del junk  # back to the pool: the forward's capture below reuses its blocks
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out, routing = forward()
    nan_rows = seen["nan_rows"]
    g = torch.Generator(device="cuda").manual_seed(13)
    for _ in range(3):
        logits.copy_(torch.randn(logits.shape, generator=g, device="cuda"))
        poison.replay()  # in capture order: the pool's blocks NaN again
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(out, x, logits, w13, w2, expert_map, top_k, nan_rows, routing)
        eager, _ = forward()
        assert torch.equal(out, eager)


def test_hugging_face_blocks_run_on_our_kernels():
    """Each family's block (test_moe_hf's small configs, hidden 256) on the GPU against the layer
    converted from it on the pearl backend: the same choices, every token within bf16 sums."""
    pytest.importorskip("transformers")
    from test_moe_hf import FAMILIES, hf_block

    from pearl_moe.moe.hf import from_hf

    changes = dict(moe_intermediate_size=128)
    for family in FAMILIES:
        sizes = dict(intermediate_size=128) if family == "mixtral" else changes
        if family == "qwen2_moe":
            sizes["shared_expert_intermediate_size"] = 192
        block = hf_block(family, seed=5, hidden=256, **sizes).cuda()
        layer = from_hf(block, backend="pearl")
        x = torch.randn(4, 16, 256, device="cuda").bfloat16()
        flat = x.reshape(-1, 256)
        with torch.no_grad():
            want, hf_ids = block(x), block.gate(flat)[2]
        assert torch.equal(layer.route(flat)[2].sort(-1).values, hf_ids.sort(-1).values), family
        out = layer(x)
        err = (out.float() - want.float()).norm(dim=-1) / want.float().norm(dim=-1)
        assert err.max().item() < 0.02, (family, err.max().item())


def test_a_model_with_the_layer_compiles_with_the_default_backend():
    """``torch.compile`` (inductor) of a block holding the layer on the pearl backend: one graph
    (``fullgraph=True``), the layer's experts one custom op, the output the eager one's within
    bf16 rounding."""
    from pearl_moe.moe import MoE

    hidden, inter, experts, top_k = LAYERS["qwen3-30b-ep8"]
    torch.manual_seed(0)
    layer = MoE(hidden, inter, experts, top_k, backend="pearl", device="cuda")

    def block(x):
        return x + layer(x, check=False)

    x = torch.randn(2, 32, hidden, device="cuda").bfloat16()
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)
    out = compiled(x)
    err = (out.float() - eager.float()).norm(dim=-1) / eager.float().norm(dim=-1)
    assert err.max().item() < 0.02

"""The MoE layer on the GPU with this package's grouped GEMMs (``pytest -m gpu``): against the
float32 reference layer token by token, with skewed routing, experts without tokens and top-1; no
host sync with ``check=False``, and the whole forward captured in a CUDA graph."""

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

from pearl_moe.kernels import interleave_gate_up  # noqa: E402
from pearl_moe.moe import moe_forward, reference_moe, select_experts, torch_composition  # noqa: E402

#: Qwen3-30B-A3B's expert shapes under EP=8 (16 local experts, top-8), and a top-1 layer.
LAYERS = {"qwen3-30b-ep8": (2048, 768, 16, 8), "top1": (1024, 512, 8, 1)}
#: The layer benchmark's implementations that run in this environment (SonicMoE, the fifth, runs
#: in its own: ``scripts/layer_runs.sh sonic``).
IMPLS = ("pearl", "pearl-fused", "pearl-gather", "torch", "quack")


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


def test_the_layer_bench_checks_every_implementation():
    """Every implementation of the layer benchmark passes the check against the float32 layer on
    one fresh input set (eager; the CUDA-graph timing runs in the test below)."""
    from pearl_moe.bench.layer import LayerProblem, check_layer, layer_impl

    problem = LayerProblem("Qwen3-30B-A3B", 16)
    impls = {n: layer_impl(n) for n in IMPLS}
    checks = check_layer(impls, problem)
    for name in IMPLS:
        if name == "quack" and checks[name][0] is None:
            continue  # quack is not installed here
        assert checks[name][0] is True, (name, checks[name])


@pytest.mark.parametrize("name", IMPLS)
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

"""Every kernel stage of both families against an fp32 reference on a real GPU (``pytest -m gpu``).

One test per concept, each parametrized over the two kernel families: a case runs on the GPU
whose family it names (``sm_90a``: Hopper; ``sm_100a``: B200 or B300) and skips on the other.
The cases, and how each is checked, live in :mod:`pearl_moe.diagnostics.gpu_cases` (shared with
the selftest and with ``tests/test_compile_gpu_cases.py``, which compiles every sm_100a case on a
CPU). Inputs are fresh random numbers, outputs are poisoned with NaN first, and the tolerance is
twice PyTorch's own bf16 error on the same inputs plus a small floor (``pearl_moe.bench.verify``).
The options of one family only are in ``test_kernels_sm90_gpu.py`` and
``test_kernels_sm100_gpu.py``; many tiles a CTA in ``test_multi_tile_gpu.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.diagnostics import gpu_cases as gc  # noqa: E402
from pearl_moe.diagnostics.gpu_cases import Case  # noqa: E402
from pearl_moe.workloads import MODELS, make_problem  # noqa: E402

pytestmark = pytest.mark.gpu
FAMILY = gc.gpu_family()


def on(arch: str, *values, id: str):
    """A parameter set that runs only on a GPU of ``arch``'s family."""
    skip = pytest.mark.skipif(FAMILY != arch, reason=f"needs a GPU that runs the {arch} kernels")
    return pytest.param(arch, *values, id=f"{arch}-{id}", marks=skip)


# ----------------------------------------------------------------------------- stages
@pytest.mark.parametrize(
    "arch, stage, problem",
    [on(a, s, p, id=f"s{s}-{p[0]}") for a in gc.ARCHS for p in gc.EDGE_CASES[a] for s in gc.STAGES],
)
def test_every_stage_on_edge_cases(arch, stage, problem):
    """Zero-row experts, one row, every row in the first or the last expert, rows and columns
    either side of a tile, a K tail: each stage with its course configuration."""
    name, counts, n, k = problem
    res = gc.check_case(Case(name, stage, None, counts, n, k), seed=sum(counts))
    assert res["ok"], res


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


@pytest.mark.parametrize(
    "arch, model, stage",
    [on(a, m, s, id=f"{m}-s{s}") for a in gc.ARCHS for m in MODELS for s in gc.STAGES],
)
def test_course_models(model_weights, arch, model, stage):
    """The course's models (EP = 8) at 1-1024 tokens a GPU, balanced, random and skewed."""
    W = model_weights(model)
    for tokens in gc.TOKENS:
        for routing in gc.ROUTINGS:
            p = make_problem(model, tokens, ep=8, routing=routing, seed=tokens)
            case = Case(f"{model}-{tokens}-{routing}", stage, None, tuple(p.counts), p.n, p.k)
            res = gc.check_case(case, seed=tokens, W=W)
            assert res["ok"], (tokens, routing, res)


@pytest.mark.parametrize(
    "arch, stage", [on(a, s, id=f"s{s}") for a in gc.ARCHS for s in gc.PREFILL_STAGES]
)
def test_prefill_of_many_rounds_is_right_and_repeats_bit_for_bit(arch, stage):
    """A prefill problem of many rounds of the static schedule (Kimi K3, 4096 tokens, skewed
    routing): right against the fp32 reference, and three more launches into poisoned outputs give
    the same bits (each tile is computed by one CTA, in a fixed order of K tiles)."""
    from pearl_moe.bench.verify import random_inputs
    from pearl_moe.kernels import grouped_gemm

    p = make_problem("Kimi K3", 4096, ep=8, routing="skewed", seed=stage)
    case = Case("prefill", stage, None, tuple(p.counts), p.n, p.k)
    res = gc.check_case(case, seed=stage)
    assert res["ok"], res
    A, W, offs = random_inputs(p.counts, p.n, p.k, seed=stage)
    ref = grouped_gemm(A, W, offs, stage=stage)
    for _ in range(3):
        out = torch.full_like(ref, float("nan"))
        grouped_gemm(A, W, offs, out=out, stage=stage)
        torch.cuda.synchronize()
        assert torch.equal(out, ref)


# ---------------------------------------------------------------- the fused gated activation
@pytest.mark.parametrize("arch, case", [on(a, c, id=c.id) for a in gc.ARCHS for c in gc.FUSED[a]])
def test_fused_gated_activation(arch, case):
    """``act(gate) * up`` in the epilogue on interleaved weights, into the middle of a NaN buffer:
    right against the fp32 reference, nothing written outside ``out``."""
    res = gc.check_fused(case, seed=sum(case.counts) + case.n)
    assert res["ok"], (case.id, res)


# ------------------------------------------------------------------------------ offsets
@pytest.mark.parametrize("arch", [on(a, id="checked") for a in gc.ARCHS])
def test_bad_offsets_raise_before_launch(arch):
    from pearl_moe.bench.verify import random_inputs
    from pearl_moe.kernels import grouped_gemm

    counts, n, k, _ = gc.BAD_OFFSET_CONFIGS[arch]
    A, W, offs = random_inputs(counts, n, k)
    decreasing = offs.clone()
    decreasing[0] = offs[1] + 1
    with pytest.raises(ValueError, match="monotone"):
        grouped_gemm(A, W, decreasing, stage=3)
    short = offs.clamp(max=sum(counts) - 1)  # monotone, one row short
    with pytest.raises(ValueError, match="end at row"):
        grouped_gemm(A, W, short, stage=3)
    torch.cuda.synchronize()  # the context is still usable
    assert grouped_gemm(A, W, offs, stage=3).isfinite().all()


def _bad_offset_params():
    params = []
    for arch in gc.ARCHS:
        counts, _, _, configs = gc.BAD_OFFSET_CONFIGS[arch]
        for name, (stage, config) in configs.items():
            for i, bad in enumerate(gc.bad_offsets(len(counts))):
                params.append(on(arch, stage, config, bad, id=f"{name}-{i}"))
    return params


@pytest.mark.parametrize("arch, stage, config, bad", _bad_offset_params())
def test_unchecked_bad_offsets_write_only_inside_out(arch, stage, config, bad):
    """With ``check=False`` the kernels clamp the offsets on the device: a guard band of sentinel
    rows around ``out`` survives any offsets (also through the TMA store's per-expert
    descriptors, written from the clamped offsets)."""
    res = gc.check_guard_band(arch, stage, config, bad)
    assert res["ok"], (bad, res)


# ------------------------------------------------------------------------------- graphs
@pytest.mark.parametrize(
    "arch, stage", [on(a, s, id=f"s{s}") for a in gc.ARCHS for s in gc.GROUPED]
)
def test_cu_seqlens_and_graph_capture(arch, stage):
    """E + 1 ``cu_seqlens`` with a leading 0 and ``check=False``, captured in a CUDA graph: the
    replay equals the checked eager call with E end offsets bit for bit."""
    from pearl_moe.bench.verify import random_inputs
    from pearl_moe.kernels import grouped_gemm

    routings, n, k = gc.GRAPH_ROUTINGS[arch]
    A, W, offs = random_inputs(routings[0], n, k, seed=3)
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


@pytest.mark.parametrize(
    "arch, name", [on(a, name, id=name) for a in gc.ARCHS for name in gc.GRAPH_CONFIGS[a]]
)
def test_graph_replay_follows_rerouting(arch, name):
    """One capture, replayed after the router wrote new offsets (and new rows) into the captured
    tensors: every expert empty but one, every expert busy, the rows moved between experts. Each
    replay equals an eager call bit for bit and is right (the TMA-store stages rewrite their
    per-expert descriptors from the new offsets inside the graph)."""
    stage, config = gc.GRAPH_CONFIGS[arch][name]
    res = gc.check_graph_rerouting(arch, stage, config)
    assert res["ok"], res

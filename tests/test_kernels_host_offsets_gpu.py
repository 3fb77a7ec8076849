"""Stage 1 (the per-expert loop) with offsets handed over on the host: capturable in a graph."""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


def _inputs(counts, k=256, n=384, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = sum(counts)
    A = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=g)
    W = torch.randn(len(counts), n, k, device="cuda", dtype=torch.bfloat16, generator=g) / k**0.5
    ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    return A, W, ends


def test_stage1_with_host_offsets_runs_inside_a_cuda_graph():
    from pearl_moe.kernels import grouped_gemm
    from pearl_moe.workloads import counts_to_offsets

    counts = [5, 0, 130, 1]
    A, W, ends = _inputs(counts)
    host = counts_to_offsets(counts)
    out = torch.full((A.shape[0], W.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_gemm(A, W, ends, out=out, stage=1, check=False, host_offsets=host)  # compile first
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_gemm(A, W, ends, out=out, stage=1, check=False, host_offsets=host)
    graph.replay()
    torch.cuda.synchronize()
    ref = torch.cat(
        [
            A[a:b].float() @ W[e].float().T
            for e, (a, b) in enumerate(zip([0, *host[:-1]], host, strict=True))
        ]
    )
    assert not out.isnan().any()
    err = (out.float() - ref).abs().max().item()
    assert err < 0.05, err


def test_host_offsets_that_disagree_with_the_tensor_are_refused():
    from pearl_moe.kernels import grouped_gemm

    A, W, ends = _inputs([4, 4])
    with pytest.raises(ValueError, match="host_offsets differ"):
        grouped_gemm(A, W, ends, stage=1, check=True, host_offsets=[3, 8])
    with pytest.raises(ValueError, match="not monotone"):
        grouped_gemm(A, W, ends, stage=1, check=False, host_offsets=[5, 4])

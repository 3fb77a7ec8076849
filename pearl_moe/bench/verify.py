"""Correctness checks shared by the GPU tests and the device script.

A kernel's output is compared with a float32 reference; the tolerance is relative to PyTorch's own
bf16 error on the same inputs (one ``torch.mm`` per expert in bf16,
:func:`pearl_moe.moe.reference.grouped_mm_loop`): the kernel may be at most
twice as far from the reference, plus a small floor. The output is poisoned with NaN first, so an
unwritten element fails the check.
"""

from __future__ import annotations

__all__ = [
    "reference",
    "compare",
    "relative_error",
    "random_inputs",
    "run_checked",
]

FLOOR = 5e-4


def reference(A, W, host_offsets):
    """fp32 reference, expert by expert (one expert's weights upcast at a time)."""
    import torch

    out = torch.zeros(A.shape[0], W.shape[1], dtype=torch.float32, device=A.device)
    start = 0
    for e, end in enumerate(host_offsets):
        if end > start:
            out[start:end] = A[start:end].float() @ W[e].float().T
        start = end
    return out


def relative_error(x, ref) -> float:
    """``|x - ref| / |ref|`` in the 2-norm, over all elements (``ref`` float32)."""
    import torch

    return (
        torch.linalg.vector_norm(x.float() - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30)
    ).item()


def compare(out, ref, torch_out) -> dict:
    import torch

    unwritten = int(torch.isnan(out).sum().item())
    finite = bool(torch.isfinite(out).all().item())
    err = relative_error(out, ref) if finite else float("inf")
    terr = relative_error(torch_out, ref)
    ok = finite and unwritten == 0 and err <= 2 * terr + FLOOR
    return dict(ok=ok, err=err, torch_err=terr, unwritten=unwritten)


def random_inputs(counts, n, k, W=None, seed=0, device="cuda"):
    """A (rows, k) ~ N(0, 1) bf16, W (E, n, k) ~ N(0, 1/k) bf16, int32 end offsets on device."""
    import torch

    from ..workloads import counts_to_offsets

    g = torch.Generator(device=device).manual_seed(seed)
    rows = sum(counts)
    A = torch.randn(rows, k, generator=g, device=device).to(torch.bfloat16)
    if W is None:
        W = (torch.randn(len(counts), n, k, generator=g, device=device) * k**-0.5).to(
            torch.bfloat16
        )
    offs = torch.tensor(counts_to_offsets(counts), dtype=torch.int32, device=device)
    return A, W, offs


def run_checked(fn, A, W, offs, host_offsets, cpu_reference: bool = False) -> dict:
    """Poison an output, run ``fn(A, W, offs, out)``, compare with reference and torch bf16.

    ``cpu_reference``: compute both references on the CPU, so that no cuBLAS GEMM runs on the
    GPU (what a compute-sanitizer run should see)."""
    import torch

    from ..moe.reference import grouped_mm_loop

    out = torch.full((A.shape[0], W.shape[1]), float("nan"), dtype=torch.bfloat16, device=A.device)
    fn(A, W, offs, out)
    torch.cuda.synchronize()
    if cpu_reference:
        A, W, out = A.cpu(), W.cpu(), out.cpu()
    return compare(out, reference(A, W, host_offsets), grouped_mm_loop(A, W, host_offsets))

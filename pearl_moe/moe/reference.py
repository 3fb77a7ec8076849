"""Two MoE layers to check ours against, written the plainest way.

* :func:`reference_moe`: float32, token by token and choice by choice, sharing no code with the
  layer (not its routing, not its GEMMs): the truth a test compares with.
* :func:`torch_composition`: the bf16 layer a user composes today from torch operations
  (``index_select``, a grouped GEMM, ``silu * mul``, a grouped GEMM, a weighted ``index_add_``).
  Its distance from the reference sets a test's tolerance, and it is the torch baseline of the
  layer's benchmark.
"""

from __future__ import annotations

__all__ = ["reference_moe", "torch_composition", "gated", "ACTIVATIONS", "GATE_UP_LAYOUTS"]

#: The gated activations of a gate+up projection: ``act(gate) * up``.
ACTIVATIONS = ("swiglu", "geglu")


#: How a gate+up projection's ``2 x intermediate`` outputs are ordered: ``[gate | up]``, or gate
#: and up in alternating blocks of 8 (:func:`pearl_moe.kernels.interleave_gate_up`, what the
#: fused epilogue reads).
GATE_UP_LAYOUTS = ("concat", "interleaved")


def gated(h, activation: str = "swiglu", layout: str = "concat"):
    """``act(gate) * up`` of a gate+up projection's output ``h`` (last dimension ``2 x I``), in
    float32. ``layout`` says how ``h``'s columns are ordered (:data:`GATE_UP_LAYOUTS`).

    SwiGLU's ``act`` is SiLU; GeGLU's is GELU (tanh approximation)."""
    import torch

    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if layout not in GATE_UP_LAYOUTS:
        raise ValueError(f"layout must be one of {GATE_UP_LAYOUTS}, got {layout!r}")
    if layout == "concat":
        gate, up = h.float().chunk(2, dim=-1)
    else:
        blocks = h.float().unflatten(-1, (h.shape[-1] // 16, 2, 8))
        gate, up = blocks[..., 0, :].flatten(-2), blocks[..., 1, :].flatten(-2)
    if activation == "swiglu":
        return torch.nn.functional.silu(gate) * up
    return torch.nn.functional.gelu(gate, approximate="tanh") * up


def reference_moe(x, w_gate_up, w_down, topk_ids, topk_weights, activation: str = "swiglu"):
    """The layer in float32: for every token and each of its choices, ``weight * W_down[e] @
    act(W_gate_up[e] @ x)``, summed over the choices; a choice outside ``[0, experts)`` (masked)
    adds nothing. Slow and plain on purpose."""
    import torch

    out = torch.zeros(x.shape[0], w_down.shape[1], dtype=torch.float32, device=x.device)
    ids, weights = topk_ids.tolist(), topk_weights.float()
    for t, choices in enumerate(ids):
        xt = x[t].float()
        for j, e in enumerate(choices):
            if not 0 <= e < w_gate_up.shape[0]:
                continue
            h = w_gate_up[e].float() @ xt
            out[t] += weights[t, j] * (w_down[e].float() @ gated(h, activation))
    return out


def grouped_mm_loop(A, W, end_offsets):
    """``out[rows_e] = A[rows_e] @ W[e]^T`` with one ``torch.mm`` per expert, in A's dtype.

    ``end_offsets`` are the E end offsets as a host list. The layer's ``loop`` backend (any device),
    and PyTorch's own bf16 answer that the kernels' checks hold their error against."""
    import torch

    out = torch.zeros(A.shape[0], W.shape[1], dtype=A.dtype, device=A.device)
    start = 0
    for e, end in enumerate(end_offsets):
        if end > start:
            torch.mm(A[start:end], W[e].T, out=out[start:end])
        start = end
    return out


def torch_composition(x, w_gate_up, w_down, topk_ids, topk_weights, activation: str = "swiglu"):
    """The bf16 layer from torch operations, as a user writes it today: sort the routed rows by
    expert, ``index_select`` them, grouped GEMM (``torch._grouped_mm`` on a GPU that has its fast
    path, else a loop over experts), activation, grouped GEMM, and a weighted ``index_add_`` into
    the output (on a GPU its atomic adds make the sum's order, and its last bits, vary)."""
    import torch

    tokens, top_k = topk_ids.shape
    flat = topk_ids.reshape(-1).long()
    order = torch.sort(flat, stable=True).indices
    # rows per expert by scatter_add: torch.bincount would size its output on the host (a sync,
    # which a CUDA graph cannot capture)
    counts = torch.zeros(w_gate_up.shape[0], dtype=torch.int32, device=x.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    token = torch.div(order, top_k, rounding_mode="floor")
    A = x.index_select(0, token)
    fast = x.is_cuda and torch.cuda.get_device_capability(x.device)[0] in (9, 10)
    if fast:
        h = torch._grouped_mm(A, w_gate_up.transpose(-2, -1), offs=offsets)
    else:
        h = grouped_mm_loop(A, w_gate_up, offsets.tolist())
    a = gated(h, activation).to(x.dtype)
    if fast:
        y = torch._grouped_mm(a, w_down.transpose(-2, -1), offs=offsets)
    else:
        y = grouped_mm_loop(a, w_down, offsets.tolist())
    y = y.float() * topk_weights.reshape(-1)[order].float().unsqueeze(1)
    out = torch.zeros(tokens, w_down.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, token, y)
    return out.to(x.dtype)

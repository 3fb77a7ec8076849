"""An MoE layer's forward pass on the grouped GEMMs: route, gather, gate+up, activation, down,
combine.

    y = moe_forward(x, w_gate_up, w_down, router_logits=logits, top_k=8)
    layer = MoE.from_weights(router_weight, w_down, w_gate=w1, w_up=w3, top_k=2)
    y = layer(x)

Weights are in the ``nn.Linear`` layout of a grouped GEMM: ``w_gate_up`` ``(experts, 2 x
intermediate, hidden)`` with the gate rows first and the up rows after them (``[gate; up]``, the
common fused layout), ``w_down`` ``(experts, hidden, intermediate)``.

The steps (each after the first a pass over HBM):

1. routing metadata on the device (:mod:`pearl_moe.moe.routing`): no host sync;
2. ``A = x[token_of_row]``: the routed rows, sorted by expert (a gather copy);
3. ``h = grouped_gemm(A, w_gate_up)``, then ``a = act(gate) * up`` in float32, stored in bf16; with
   ``gate_up_layout="interleaved"`` and the pearl backend, one step: the gate+up kernel's
   epilogue computes and stores ``a`` (:func:`pearl_moe.kernels.interleave_gate_up`);
4. ``y = grouped_gemm(a, w_down)``;
5. the combine: every token sums its ``top_k`` rows of ``y`` times their router weights, in float32
   and in the order of its choices, read through ``row_of_slot``: the same inputs give the same
   bits on every run (no atomics).

``backend`` picks the grouped GEMM: ``"pearl"`` (this package's kernels, Hopper or Blackwell),
``"torch"`` (``torch._grouped_mm``), ``"loop"`` (one ``torch.mm`` per expert; any device, reads the
offsets on the host) or ``"auto"``: pearl on a Hopper or Blackwell GPU, else the loop. With
``check=False`` and the pearl or torch backend, nothing reads back to the host, so the whole
forward can be captured in a CUDA graph.
"""

from __future__ import annotations

from . import glue_kernels
from .reference import ACTIVATIONS, GATE_UP_LAYOUTS, gated, grouped_mm_loop
from .routing import Routing, route_topk, select_experts

__all__ = ["MoE", "moe_forward", "grouped", "BACKENDS", "GATHERS"]

BACKENDS = ("auto", "pearl", "torch", "loop")
#: How the gate+up GEMM gets the routed rows of x: a gathered copy, or read through the index
#: inside the kernel (``grouped_gemm(..., a_index=...)``, sm_90a).
GATHERS = ("copy", "kernel")


def _resolve_backend(backend: str, device) -> str:
    import torch

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        if backend in ("pearl", "torch") and device.type != "cuda":
            raise ValueError(f"backend {backend!r} needs tensors on a CUDA GPU, got {device}")
        return backend
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] in (9, 10):
        return "pearl"
    return "loop"


def grouped(A, W, offsets, backend: str):
    """``out[rows_e] = A[rows_e] @ W[e]^T`` with the given backend (see the module docstring)."""
    import torch

    if backend == "pearl":
        from ..kernels import grouped_gemm

        return grouped_gemm(A, W, offsets, check=False)
    if backend == "torch":
        return torch._grouped_mm(A, W.transpose(-2, -1), offs=offsets)
    return grouped_mm_loop(A, W, offsets.tolist())  # reads the offsets on the host


def _check_weights(x, w_gate_up, w_down):
    import torch

    for name, t in (("x", x), ("w_gate_up", w_gate_up), ("w_down", w_down)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise ValueError(f"{name} must be bfloat16, got {t.dtype}")
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x on {x.device}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (tokens, hidden), got shape {tuple(x.shape)}")
    if w_gate_up.dim() != 3 or w_down.dim() != 3:
        raise ValueError(
            "w_gate_up must be (experts, 2 x intermediate, hidden) and w_down (experts, hidden, "
            f"intermediate); got {tuple(w_gate_up.shape)} and {tuple(w_down.shape)}"
        )
    experts, two_i, hidden = w_gate_up.shape
    if hidden != x.shape[1]:
        raise ValueError(f"w_gate_up's hidden size {hidden} differs from x's {x.shape[1]}")
    if two_i % 2:
        raise ValueError(f"w_gate_up has {two_i} rows per expert: [gate; up] needs an even count")
    if tuple(w_down.shape) != (experts, hidden, two_i // 2):
        raise ValueError(
            f"w_down must be (experts, hidden, intermediate) = {(experts, hidden, two_i // 2)}, "
            f"got {tuple(w_down.shape)}"
        )
    return experts, hidden, two_i // 2


def moe_forward(
    x,
    w_gate_up,
    w_down,
    *,
    router_logits=None,
    top_k: int | None = None,
    topk_ids=None,
    topk_weights=None,
    activation: str = "swiglu",
    renormalize: bool = True,
    backend: str = "auto",
    check: bool = True,
    return_routing: bool = False,
    gate_up_layout: str = "concat",
    gather: str = "copy",
):
    """The layer's output ``(tokens, hidden)`` in bf16 for ``x`` ``(tokens, hidden)`` bf16.

    ``gather="kernel"`` (pearl backend, sm_90a): the gate+up kernel reads ``x``'s rows through
    the routing's gather index (``grouped_gemm(..., a_index=...)``) instead of a gathered copy
    ``x[token_of_row]`` written and read back (``gather="copy"``, the default: on the H200 the
    in-kernel gather, whose producer copies rows by ``cp.async``, was slower than the copy at most
    of the layer run's shapes).

    ``gate_up_layout="interleaved"``: ``w_gate_up``'s rows are in the fused epilogue's layout
    (:func:`pearl_moe.kernels.interleave_gate_up`); with the pearl backend the activation is then
    computed in the gate+up kernel's epilogue, which stores only ``act(gate) * up`` (half the
    bytes, no activation pass), except where the GPU's table measured the tiles the fused picks
    use slower than a separate activation pass costs
    (:func:`pearl_moe.kernels.autotune.fuse_activation`; on the H200 table that is no course
    shape, since the sm_90a fused epilogue takes 96-wide tiles): then the plain GEMM and the
    pass. ``gather="kernel"`` always fuses. Other backends apply it after their GEMM.

    Routing comes from ``router_logits`` ``(tokens, experts)`` with ``top_k`` (softmax over all
    experts, the ``top_k`` largest, renormalized unless ``renormalize=False``), or is given as
    ``topk_ids`` and ``topk_weights`` ``(tokens, top_k)``. ``check=False`` skips the checks that
    read device values (expert ids in range), for CUDA-graph capture. ``return_routing`` also
    returns the :class:`~pearl_moe.moe.routing.Routing`. Bad input raises ``ValueError`` before
    any work is launched.
    """
    import torch

    experts, hidden, inter = _check_weights(x, w_gate_up, w_down)
    if gate_up_layout not in GATE_UP_LAYOUTS:
        raise ValueError(f"gate_up_layout must be one of {GATE_UP_LAYOUTS}, got {gate_up_layout!r}")
    if gate_up_layout == "interleaved" and inter % 8:
        raise ValueError(f"the interleaved layout needs intermediate % 8 == 0, got {inter}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if gather not in GATHERS:
        raise ValueError(f"gather must be one of {GATHERS}, got {gather!r}")
    if (router_logits is None) == (topk_ids is None):
        raise ValueError("give either router_logits (with top_k) or topk_ids and topk_weights")
    if router_logits is not None:
        if tuple(getattr(router_logits, "shape", ())) != (x.shape[0], experts):
            raise ValueError(
                f"router_logits must be (tokens, experts) = {(x.shape[0], experts)}, got "
                f"{tuple(getattr(router_logits, 'shape', ()))}"
            )
        if top_k is None:
            raise ValueError("router_logits need top_k")
        topk_weights, topk_ids = select_experts(router_logits, top_k, renormalize=renormalize)
    elif topk_weights is None:
        raise ValueError("topk_ids need topk_weights")
    if topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk_ids has {topk_ids.shape[0]} tokens, x has {x.shape[0]}")
    if topk_ids.device != x.device:
        raise ValueError(f"topk_ids are on {topk_ids.device} but x on {x.device}")
    backend = _resolve_backend(backend, x.device)
    if gather == "kernel" and backend != "pearl":
        raise ValueError(
            f"gather='kernel' reads x through an index inside the pearl kernels (sm_90a); the "
            f"{backend!r} backend needs gather='copy'"
        )
    routing = route_topk(topk_ids, topk_weights, experts, check=check)
    if x.shape[0] == 0:
        out = torch.zeros(0, hidden, dtype=x.dtype, device=x.device)
        return (out, routing) if return_routing else out
    if gather == "kernel":
        from ..kernels import grouped_gemm

        fused = activation if gate_up_layout == "interleaved" else None
        h = grouped_gemm(x, w_gate_up, routing.offsets, check=False, activation=fused,
                         a_index=routing.token_of_row.to(torch.int32))  # fmt: skip
        a = h if fused else gated(h, activation, gate_up_layout).to(torch.bfloat16)
    elif backend == "pearl" and gate_up_layout == "interleaved":
        from ..kernels import grouped_gemm

        A = x.index_select(0, routing.token_of_row)
        if fuses_activation(A.device, A.shape[0], w_gate_up):
            a = grouped_gemm(A, w_gate_up, routing.offsets, check=False, activation=activation)
        else:  # the activation-ready tiles measured slower than a separate pass costs
            h = grouped_gemm(A, w_gate_up, routing.offsets, check=False)
            a = gated(h, activation, gate_up_layout).to(torch.bfloat16)
    else:
        A = x.index_select(0, routing.token_of_row)
        h = grouped(A, w_gate_up, routing.offsets, backend)
        a = gated(h, activation, gate_up_layout).to(torch.bfloat16)
    y = grouped(a, w_down, routing.offsets, backend)
    out = combine(y, routing)
    return (out, routing) if return_routing else out


def fuses_activation(device, rows: int, w_gate_up) -> bool:
    """Whether the default gate+up call on these operands fuses the activation into its
    epilogue (:func:`pearl_moe.kernels.autotune.fuse_activation`)."""
    from ..kernels.api import arch_of
    from ..kernels.autotune import fuse_activation, gpu_name

    experts, n, k = w_gate_up.shape
    return fuse_activation(arch_of(device), n, k, experts, rows, gpu_name(device))


def combine(y, routing: Routing, kernels: bool | None = None):
    """``out[t] = sum_j weight[t, j] * y[row_of_slot[t, j]]`` in float32, choices summed in order
    (deterministic: a gather and a reduction over a fixed axis, no atomics); bf16 result.

    ``kernels``: one Triton kernel (:func:`pearl_moe.moe.glue_kernels.combine_rows`: one read of
    ``y``) instead of four tensor passes. ``None`` (default): on a CUDA device when Triton is
    there. Both sum the weighted rows in float32 (the kernel in choice order, with fused
    multiply-adds), so their last bits may differ; each gives the same bits on every call."""
    if kernels is None:
        kernels = y.is_cuda and glue_kernels.available()
    if kernels:
        return glue_kernels.combine_rows(
            y.contiguous(), routing.row_of_slot.contiguous(), routing.weight_of_row.contiguous()
        )
    rows = y.index_select(0, routing.row_of_slot.reshape(-1)).view(
        routing.tokens, routing.top_k, -1
    )
    weights = routing.weight_of_row.index_select(0, routing.row_of_slot.reshape(-1))
    weighted = rows.float() * weights.view(routing.tokens, routing.top_k, 1)
    return weighted.sum(dim=1).to(y.dtype)


def _torch_module_base():
    import torch

    return torch.nn.Module


class MoE(_torch_module_base()):
    """An inference MoE layer: a router (``Linear(hidden, experts)``, no bias), softmax top-k, and
    the experts' gated MLP on the grouped GEMMs (:func:`moe_forward`). No gradients: the kernels
    have no backward pass. ``gate_up_layout="interleaved"`` keeps ``w_gate_up`` in the fused
    epilogue's layout (``from_weights`` converts), so that the pearl backend fuses the activation.

    ``x`` may have any leading shape (``(..., hidden)``); the output has the same shape.
    """

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        experts: int,
        top_k: int,
        activation: str = "swiglu",
        renormalize: bool = True,
        backend: str = "auto",
        device=None,
        gate_up_layout: str = "concat",
    ):
        import torch

        super().__init__()
        if gate_up_layout not in GATE_UP_LAYOUTS:
            raise ValueError(
                f"gate_up_layout must be one of {GATE_UP_LAYOUTS}, got {gate_up_layout!r}"
            )
        self.gate_up_layout = gate_up_layout
        for name, value in (
            ("hidden", hidden), ("intermediate", intermediate), ("experts", experts),
            ("top_k", top_k),
        ):  # fmt: skip
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if top_k > experts:
            raise ValueError(f"top_k ({top_k}) exceeds the {experts} experts")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.top_k, self.activation, self.renormalize = top_k, activation, renormalize
        self.backend = backend
        bf16 = dict(device=device, dtype=torch.bfloat16)
        self.router = torch.nn.Linear(hidden, experts, bias=False, **bf16)
        self.w_gate_up = torch.nn.Parameter(
            torch.empty(experts, 2 * intermediate, hidden, **bf16), requires_grad=False
        )
        self.w_down = torch.nn.Parameter(
            torch.empty(experts, hidden, intermediate, **bf16), requires_grad=False
        )
        self.router.weight.requires_grad_(False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights ~ N(0, 1 / fan_in): unit-scale activations through the layer."""
        import torch

        with torch.no_grad():
            for w in (self.router.weight, self.w_gate_up, self.w_down):
                w.normal_(0.0, w.shape[-1] ** -0.5)

    @classmethod
    def from_weights(
        cls,
        router_weight,
        w_down,
        *,
        w_gate_up=None,
        w_gate=None,
        w_up=None,
        top_k: int,
        **kwargs,
    ) -> MoE:
        """A layer holding existing tensors (copied to bf16): ``router_weight`` ``(experts,
        hidden)``, ``w_down`` ``(experts, hidden, intermediate)``, and either ``w_gate_up``
        ``(experts, 2 x intermediate, hidden)`` as ``[gate; up]`` or ``w_gate`` and ``w_up``
        ``(experts, intermediate, hidden)`` each (a checkpoint's ``w1`` and ``w3``)."""
        import torch

        if (w_gate_up is None) == (w_gate is None and w_up is None):
            raise ValueError("give either w_gate_up or both w_gate and w_up")
        if w_gate_up is None:
            if w_gate is None or w_up is None or w_gate.shape != w_up.shape or w_gate.dim() != 3:
                raise ValueError(
                    "w_gate and w_up must both be (experts, intermediate, hidden), got "
                    f"{tuple(getattr(w_gate, 'shape', ()))} and {tuple(getattr(w_up, 'shape', ()))}"
                )
            w_gate_up = torch.cat([w_gate, w_up], dim=1)
        if w_gate_up.dim() != 3 or router_weight.dim() != 2:
            raise ValueError("w_gate_up must be 3-D and router_weight 2-D (experts, hidden)")
        experts, two_i, hidden = w_gate_up.shape
        if tuple(router_weight.shape) != (experts, hidden):
            raise ValueError(
                f"router_weight must be (experts, hidden) = {(experts, hidden)}, got "
                f"{tuple(router_weight.shape)}"
            )
        if tuple(w_down.shape) != (experts, hidden, two_i // 2) or two_i % 2:
            raise ValueError(
                f"w_down must be (experts, hidden, intermediate) = {(experts, hidden, two_i // 2)}"
                f", got {tuple(w_down.shape)}"
            )
        layer = cls(hidden, two_i // 2, experts, top_k, device=w_gate_up.device, **kwargs)
        if layer.gate_up_layout == "interleaved":
            from ..kernels.gated_layout import interleave_gate_up

            w_gate_up = interleave_gate_up(w_gate_up)
        with torch.no_grad():
            layer.router.weight.copy_(router_weight)
            layer.w_gate_up.copy_(w_gate_up)
            layer.w_down.copy_(w_down)
        return layer

    def forward(self, x, check: bool = True):
        import torch

        with torch.no_grad():
            shape = x.shape
            flat = x.reshape(-1, shape[-1])
            logits = flat.float() @ self.router.weight.float().T
            out = moe_forward(
                flat, self.w_gate_up, self.w_down, router_logits=logits, top_k=self.top_k,
                activation=self.activation, renormalize=self.renormalize, backend=self.backend,
                check=check, gate_up_layout=self.gate_up_layout,
            )  # fmt: skip
            return out.view(shape)

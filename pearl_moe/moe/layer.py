"""An MoE layer's forward pass on the grouped GEMMs: route, gather, gate+up, activation, down,
combine.

    y = moe_forward(x, w_gate_up, w_down, router_logits=logits, top_k=8)
    layer = MoE.from_weights(router_weight, w_down, w_gate=w1, w_up=w3, top_k=2)
    y = layer(x)                  # checks the expert ids on the host: one sync
    y = layer(x, check=False)     # no sync: capturable in a CUDA graph

Weights are in the ``nn.Linear`` layout of a grouped GEMM: ``w_gate_up`` ``(experts, 2 x
intermediate, hidden)`` with the gate rows first and the up rows after them (``[gate; up]``, the
common fused layout), ``w_down`` ``(experts, hidden, intermediate)``.

The steps (each after the first a pass over HBM):

1. routing metadata on the device (:mod:`pearl_moe.moe.routing`): no host sync;
2. ``A = x[token_of_row]``: the routed rows, sorted by expert (a gather copy; on a GPU with the
   glue kernels, up to 256 routed rows, the routing's one launch writes it:
   :func:`route_and_gather`);
3. ``h = grouped_gemm(A, w_gate_up)``, then ``a = act(gate) * up`` in float32, stored in bf16; with
   ``gate_up_layout="interleaved"`` and the pearl backend, one step: the gate+up kernel's
   epilogue computes and stores ``a`` (:func:`pearl_moe.kernels.interleave_gate_up`);
4. ``y = grouped_gemm(a, w_down)``;
5. the combine: every token sums its ``top_k`` rows of ``y`` times their router weights, in float32
   and in the order of its choices, read through ``row_of_slot``: the same inputs give the same
   bits on every run (no atomics). A masked choice (an expert id outside ``[0, experts)``, such as
   the -1 of another GPU's expert under expert parallelism) adds exactly 0.

``backend`` picks the grouped GEMM: ``"pearl"`` (this package's kernels, Hopper or Blackwell),
``"torch"`` (``torch._grouped_mm``), ``"loop"`` (one ``torch.mm`` per expert; any device, reads the
offsets on the host) or ``"auto"``: pearl on a Hopper or Blackwell GPU, else the loop.

**Host syncs and CUDA graphs.** ``check=True`` (the default) reads the expert ids' smallest and
largest value back to the host to refuse an id out of range: one sync per call. ``check=False``
with the pearl or torch backend reads nothing back, so the whole forward can be captured in a CUDA
graph. Every shape, dtype, layout and argument problem is a ``ValueError`` raised before anything
is launched (with the pearl backend the kernels' own validation is asked first).

Under ``torch.compile`` the experts run as one custom op, ``torch.ops.pearl_moe.moe_experts``
(with a fake implementation for tracing), so a compiled model keeps the layer in its graph (not
``moe_forward(..., return_routing=True)``, whose routing tensors the op does not return).
"""

from __future__ import annotations

import torch

from . import glue_kernels
from .reference import ACTIVATIONS, GATE_UP_LAYOUTS, gated, grouped_mm_loop
from .routing import (
    Routing,
    check_ids,
    check_routing,
    check_topk,
    local_ids,
    route_and_gather,
    route_topk,
    select_experts,
)

__all__ = ["MoE", "moe_forward", "grouped", "combine", "BACKENDS", "GATHERS"]

BACKENDS = ("auto", "pearl", "torch", "loop")
#: How the gate+up GEMM gets the routed rows of x: a gathered copy, or read through the index
#: inside the kernel (``grouped_gemm(..., a_index=...)``, sm_90a).
GATHERS = ("copy", "kernel")


#: Routed rows up to which a forward launches its kernels as programmatic dependents by default:
#: decode, where the routing is one launch (:data:`glue_kernels.BLOCK_ROWS`). There each kernel
#: is a few microseconds and the launches are a visible part of the layer; beyond, the two GEMMs
#: launched so ran slower on an H100 (Mixtral-8x7B at 256 tokens: 1.09-1.10x, and 1.00x with
#: either GEMM alone so launched; ``experiments/pdl_decode``).
PDL_MAX_ROWS = glue_kernels.BLOCK_ROWS
#: Where the default launches so: where it was measured. The sm_100a kernels implement ``pdl``
#: (compile-checked) but have not run it on a B200: ``pdl=True`` asks for it there.
PDL_DEFAULT_ARCHS = ("sm_90a",)


def programmatic_launches(pdl: bool | None, backend: str, rows: int, device=None) -> bool:
    """Whether a forward of ``rows`` routed rows on ``device`` launches its kernels as
    programmatic dependents (``pdl`` of :func:`moe_forward`; None: with the pearl backend, whose
    kernels implement it, up to :data:`PDL_MAX_ROWS` rows, on :data:`PDL_DEFAULT_ARCHS`)."""
    _check_pdl(pdl, backend)
    if pdl is None:
        if backend != "pearl" or rows > PDL_MAX_ROWS:
            return False
        from ..kernels.api import arch_of

        return arch_of(device) in PDL_DEFAULT_ARCHS
    return pdl


def _check_pdl(pdl, backend: str) -> None:
    """``ValueError`` for a ``pdl`` that is no bool or None, or True with another backend."""
    if pdl is not None and not isinstance(pdl, bool):
        raise ValueError(f"pdl must be None, True or False, got {pdl!r}")
    if pdl and backend != "pearl":
        raise ValueError(
            f"pdl=True: programmatic dependent launches are implemented by the pearl backend's "
            f"kernels, not the {backend!r} backend"
        )


def _resolve_backend(backend: str, device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        if backend in ("pearl", "torch") and device.type != "cuda":
            raise ValueError(f"backend {backend!r} needs tensors on a CUDA GPU, got {device}")
        return backend
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] in (9, 10):
        return "pearl"
    return "loop"


def grouped(A, W, offsets, backend: str, pdl: bool = False):
    """``out[rows_e] = A[rows_e] @ W[e]^T`` with the given backend (see the module docstring);
    ``pdl``: the pearl kernel as a programmatic dependent launch (``grouped_gemm(..., pdl=True)``)."""
    if backend == "pearl":
        from ..kernels import grouped_gemm

        return grouped_gemm(A, W, offsets, check=False, pdl=pdl)
    if backend == "torch":
        return torch._grouped_mm(A, W.transpose(-2, -1), offs=offsets)
    return grouped_mm_loop(A, W, offsets.tolist())  # reads the offsets on the host


def _check_weights(x, w_gate_up, w_down):
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


def _check_expert_map(expert_map, device) -> None:
    if expert_map is not None and not (
        isinstance(expert_map, torch.Tensor) and expert_map.dim() == 1 and expert_map.numel()
        and expert_map.dtype in (torch.int32, torch.int64) and expert_map.device == device
    ):  # fmt: skip
        raise ValueError(
            "expert_map must be a 1-D int32/int64 tensor on x's device: each global expert's "
            "local id, -1 for an expert held elsewhere"
        )


def _check_call(x, w_gate_up, w_down, top_k, activation, backend, layout, gather):
    """Every check of a forward that reads no device value; returns the resolved backend. With
    the pearl backend the kernels are asked too (:func:`_check_kernels`), except while
    ``torch.compile`` traces (the custom op asks them when it runs)."""
    experts, hidden, inter = _check_weights(x, w_gate_up, w_down)
    if layout not in GATE_UP_LAYOUTS:
        raise ValueError(f"gate_up_layout must be one of {GATE_UP_LAYOUTS}, got {layout!r}")
    if layout == "interleaved" and inter % 8:
        raise ValueError(f"the interleaved layout needs intermediate % 8 == 0, got {inter}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if gather not in GATHERS:
        raise ValueError(f"gather must be one of {GATHERS}, got {gather!r}")
    backend = _resolve_backend(backend, x.device)
    if gather == "kernel" and backend != "pearl":
        raise ValueError(
            f"gather='kernel' reads x through an index inside the pearl kernels (sm_90a); the "
            f"{backend!r} backend needs gather='copy'"
        )
    if backend == "torch" and (hidden % 8 or inter % 8):
        raise ValueError(
            f"the torch backend's grouped_mm needs 16-byte rows: hidden ({hidden}) and "
            f"intermediate ({inter}) must be multiples of 8"
        )
    if backend != "loop" and not (w_gate_up.is_contiguous() and w_down.is_contiguous()):
        raise ValueError("w_gate_up and w_down must be contiguous (row-major, hidden innermost)")
    if backend == "pearl" and not torch.compiler.is_compiling():
        _check_kernels(x, w_gate_up, w_down, x.shape[0] * top_k, activation, layout, gather)
    return backend


def _check_kernels(x, w_gate_up, w_down, rows: int, activation, layout, gather) -> None:
    """Ask the kernels whether they run this forward's two GEMMs, before anything is launched:
    the public call's validation (``api.validate``, the offsets' values unread) and
    ``can_implement`` of the kernel the default call picks, as ``grouped_gemm`` asks them."""
    from ..kernels.api import arch_of, can_implement, default_choice, validate
    from ..kernels.autotune import gpu_name

    experts, inter = w_down.shape[0], w_down.shape[2]
    arch, gpu, in_kernel = arch_of(x.device), gpu_name(x.device), gather == "kernel"
    fused = layout == "interleaved" and (in_kernel or fuses_activation(x.device, rows, w_gate_up))
    offsets = torch.empty(experts, dtype=torch.int32, device=x.device)  # a stand-in: unread
    gemms = (
        ("gate+up", x if in_kernel else x.new_empty(0, x.shape[1]), w_gate_up,
         activation if fused else None, in_kernel),
        ("down", x.new_empty(0, inter), w_down, None, False),
    )  # fmt: skip
    for name, A, W, act, gathers in gemms:
        index = torch.empty(rows, dtype=torch.int32, device=x.device) if gathers else None
        validate(A, W, offsets, check=False, device_type=x.device.type, activation=act,
                 a_index=index)  # fmt: skip
        n, k = W.shape[1:]
        stage, config = default_choice(arch, n, k, experts, rows, gpu, act, gathers)
        problems = can_implement(config, stage, n, k)
        if problems:
            raise ValueError(f"the {name} GEMM ({n} x {k}) cannot run: " + "; ".join(problems))


def _check_routing(x, experts, router_logits, top_k, topk_ids, topk_weights, expert_map) -> int:
    """The routing arguments of :func:`moe_forward`, contradictions refused; returns top_k."""
    _check_expert_map(expert_map, x.device)
    if (router_logits is None) == (topk_ids is None):
        raise ValueError("give either router_logits (with top_k) or topk_ids and topk_weights")
    choosable = experts if expert_map is None else expert_map.shape[0]
    if router_logits is not None:
        if topk_weights is not None:
            raise ValueError("topk_weights come with topk_ids; router_logits make their own")
        if not isinstance(router_logits, torch.Tensor) or tuple(router_logits.shape) != (
            x.shape[0], choosable
        ):  # fmt: skip
            raise ValueError(
                f"router_logits must be (tokens, experts) = {(x.shape[0], choosable)}, got "
                f"{tuple(getattr(router_logits, 'shape', ()))}"
            )
        if router_logits.device != x.device or not router_logits.is_floating_point():
            raise ValueError("router_logits must be floating point, on x's device")
        if not isinstance(top_k, int) or not 1 <= top_k <= choosable:
            raise ValueError(f"router_logits need top_k, 1 to {choosable}, got {top_k!r}")
        return top_k
    if topk_weights is None:
        raise ValueError("topk_ids need topk_weights")
    check_topk(topk_ids, topk_weights)
    if top_k is not None and top_k != topk_ids.shape[1]:
        raise ValueError(f"top_k={top_k} contradicts topk_ids' {topk_ids.shape[1]} choices")
    if topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk_ids has {topk_ids.shape[0]} tokens, x has {x.shape[0]}")
    if topk_ids.device != x.device:
        raise ValueError(f"topk_ids are on {topk_ids.device} but x on {x.device}")
    return topk_ids.shape[1]


def moe_forward(
    x,
    w_gate_up,
    w_down,
    *,
    router_logits=None,
    top_k: int | None = None,
    topk_ids=None,
    topk_weights=None,
    expert_map=None,
    activation: str = "swiglu",
    renormalize: bool | None = None,
    backend: str = "auto",
    check: bool = True,
    return_routing: bool = False,
    gate_up_layout: str = "concat",
    gather: str = "copy",
    pdl: bool | None = None,
):
    """The layer's output ``(tokens, hidden)`` in bf16 for ``x`` ``(tokens, hidden)`` bf16.

    Routing comes from ``router_logits`` ``(tokens, experts)`` with ``top_k`` (softmax over all
    experts, the ``top_k`` largest, renormalized unless ``renormalize=False``; other scorings:
    :func:`~pearl_moe.moe.routing.select_experts`, then pass its result), or is given as
    ``topk_ids`` and ``topk_weights`` ``(tokens, top_k)``; arguments of both kinds, or a ``top_k``
    other than ``topk_ids``' width, are refused.

    ``expert_map`` (expert parallelism, vLLM's convention): ``(global experts,)`` int, each global
    expert's index in ``w_gate_up`` / ``w_down``, -1 for an expert held by another GPU; the ids
    (and ``router_logits``' columns) are then global. A choice of an expert held elsewhere, or any
    id outside ``[0, experts)``, adds exactly 0 to its token's output.

    ``check=True`` (default) refuses an expert id outside ``[-1, experts)`` (``[-1, global
    experts)`` and the map's values with ``expert_map``): it reads their range on the host, **one
    sync per call**. ``check=False`` reads nothing back: with the pearl or torch backend the call
    can be captured in a CUDA graph (the loop backend reads the offsets on the host).
    ``return_routing`` also returns the :class:`~pearl_moe.moe.routing.Routing`. Bad arguments
    raise ``ValueError`` before any work is launched.

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

    ``pdl`` (pearl backend): launch the forward's kernels (both GEMMs and the combine) as
    programmatic dependents (``grouped_gemm(..., pdl=True)``): each launches
    while the kernel before it runs, sets up, and waits on the device for that kernel to
    complete before it reads anything (the routing, whose inputs come from the caller's kernels,
    launches in stream order and lets the gate+up GEMM launch at once). ``None`` (default): with
    the pearl backend on sm_90a up to :data:`PDL_MAX_ROWS` routed rows (decode: 256, one routing
    launch); ``False``: every kernel launches after the one before it has completed. Same result.
    """
    experts = _check_weights(x, w_gate_up, w_down)[0]
    k = _check_routing(x, experts, router_logits, top_k, topk_ids, topk_weights, expert_map)
    backend = _check_call(x, w_gate_up, w_down, k, activation, backend, gate_up_layout, gather)
    _check_pdl(pdl, backend)  # decided where the kernels launch (_experts)
    if router_logits is not None:
        renormalize = True if renormalize is None else renormalize
        topk_weights, topk_ids = select_experts(router_logits, k, renormalize=renormalize)
    elif renormalize is not None:
        raise ValueError("renormalize applies to router_logits; topk_weights are taken as given")
    if torch.compiler.is_compiling() and not return_routing:
        return torch.ops.pearl_moe.moe_experts(x, w_gate_up, w_down, topk_ids, topk_weights,
                                               expert_map, activation, backend, check,
                                               gate_up_layout, gather, pdl)  # fmt: skip
    out, routing = _experts(x, w_gate_up, w_down, topk_ids, topk_weights, expert_map, activation,
                            backend, check, gate_up_layout, gather, pdl)  # fmt: skip
    return (out, routing) if return_routing else out


def _experts(x, w_gate_up, w_down, ids, weights, expert_map, activation, backend, check,
             layout, gather, pdl=None) -> tuple:  # fmt: skip
    """The experts' part of a checked forward: ``(out, routing)``. ``pdl`` is decided here, when
    the kernels launch (not while ``torch.compile`` traces the custom op's caller)."""
    experts = w_gate_up.shape[0]
    pdl = programmatic_launches(pdl, backend, ids.numel(), x.device)
    if check:
        check_ids(ids, experts, expert_map)
    if expert_map is not None:
        ids = local_ids(ids, expert_map)
    if gather == "kernel":
        routing, A = route_topk(ids, weights, experts, check=False), None
    else:  # the gathered copy; at decode the routing's one launch writes it
        routing, A = route_and_gather(ids, weights, experts, x, check=False, pdl=pdl)
    if x.shape[0] == 0:
        return torch.zeros(0, x.shape[1], dtype=x.dtype, device=x.device), routing
    if gather == "kernel":
        from ..kernels import grouped_gemm

        fused = activation if layout == "interleaved" else None
        h = grouped_gemm(x, w_gate_up, routing.offsets, check=False, activation=fused,
                         a_index=routing.token_of_row.to(torch.int32), pdl=pdl)  # fmt: skip
        a = h if fused else gated(h, activation, layout).to(torch.bfloat16)
    elif backend == "pearl" and layout == "interleaved":
        from ..kernels import grouped_gemm

        if fuses_activation(A.device, A.shape[0], w_gate_up):
            a = grouped_gemm(A, w_gate_up, routing.offsets, check=False, activation=activation,
                             pdl=pdl)  # fmt: skip
        else:  # the activation-ready tiles measured slower than a separate pass costs
            h = grouped_gemm(A, w_gate_up, routing.offsets, check=False, pdl=pdl)
            a = gated(h, activation, layout).to(torch.bfloat16)
    else:
        h = grouped(A, w_gate_up, routing.offsets, backend, pdl)
        a = gated(h, activation, layout).to(torch.bfloat16)
    y = grouped(a, w_down, routing.offsets, backend, pdl)
    return combine(y, routing, pdl=pdl), routing


@torch.library.custom_op("pearl_moe::moe_experts", mutates_args=())
def _experts_op(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, topk_ids: torch.Tensor,
    topk_weights: torch.Tensor, expert_map: torch.Tensor | None, activation: str, backend: str,
    check: bool, gate_up_layout: str, gather: str, pdl: bool | None = None,
) -> torch.Tensor:  # fmt: skip
    """The experts of a forward as one operator that ``torch.compile`` keeps whole: the kernels
    are asked first (as :func:`moe_forward` does before it launches), then :func:`_experts`."""
    if backend == "pearl":
        _check_kernels(x, w_gate_up, w_down, topk_ids.numel(), activation, gate_up_layout, gather)
    return _experts(x, w_gate_up, w_down, topk_ids, topk_weights, expert_map, activation, backend,
                    check, gate_up_layout, gather, pdl)[0]  # fmt: skip


@_experts_op.register_fake
def _experts_fake(x, w_gate_up, w_down, *args):
    return x.new_empty(x.shape[0], w_down.shape[1])


def fuses_activation(device, rows: int, w_gate_up) -> bool:
    """Whether the default gate+up call on these operands fuses the activation into its
    epilogue (:func:`pearl_moe.kernels.autotune.fuse_activation`)."""
    from ..kernels.api import arch_of
    from ..kernels.autotune import fuse_activation, gpu_name

    experts, n, k = w_gate_up.shape
    return fuse_activation(arch_of(device), n, k, experts, rows, gpu_name(device))


def combine(y, routing: Routing, kernels: bool | None = None, pdl: bool = False):
    """``out[t] = sum_j weight[t, j] * y[row_of_slot[t, j]]`` in float32, choices summed in order
    (deterministic: a gather and a reduction over a fixed axis, no atomics); bf16 result. A masked
    choice (``row_of_slot`` -1) adds 0: its row of ``y`` is never read.

    ``kernels``: one Triton kernel (:func:`pearl_moe.moe.glue_kernels.combine_rows`: one read of
    ``y``) instead of four tensor passes. ``None`` (default): on a CUDA device when Triton is
    there. Both sum the weighted rows in float32 (the kernel in choice order, with fused
    multiply-adds), so their last bits may differ; each gives the same bits on every call.
    ``pdl``: the kernel as a programmatic dependent launch (it waits for the down GEMM on the
    device, not in the stream's order)."""
    if kernels is None:
        kernels = y.is_cuda and glue_kernels.available()
    if kernels:
        return glue_kernels.combine_rows(
            y.contiguous(), routing.row_of_slot.contiguous(), routing.weight_of_row.contiguous(),
            pdl=pdl,
        )  # fmt: skip
    slots = routing.row_of_slot.reshape(-1)
    live = (slots >= 0).view(routing.tokens, routing.top_k, 1)
    safe = slots.clamp_min(0)
    rows = y.index_select(0, safe).view(routing.tokens, routing.top_k, -1)
    weights = routing.weight_of_row.index_select(0, safe).view(routing.tokens, routing.top_k, 1)
    weighted = torch.where(live, rows.float() * weights, 0.0)
    return weighted.sum(dim=1).to(y.dtype)


def _param(t, name: str, shape: tuple, dtype=torch.bfloat16):
    """``t`` as a frozen parameter of ``shape`` in ``dtype``: the tensor itself where it already
    is one (contiguous, in ``dtype``), else one converted copy."""
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
        raise ValueError(f"{name} must be a tensor of shape {shape}, got "
                         f"{tuple(getattr(t, 'shape', ()))}")  # fmt: skip
    return torch.nn.Parameter(t.detach().to(dtype).contiguous(), requires_grad=False)


def _expert_param(parts: tuple, name: str, shape: tuple, interleave: bool = False):
    """Expert weights ``(experts, rows, hidden)`` as a frozen bf16 parameter, stacked from
    ``parts``: one source, or two (gate, up) stacked as ``[gate; up]``; a source is a tensor or a
    sequence of per-expert matrices (a checkpoint's list of expert MLPs). A bf16 contiguous tensor
    is held, not copied (the layer shares its memory); anything else is converted into one new
    tensor expert by expert, so the peak stays within one copy of the weights (plus one
    expert's)."""
    experts, rows, hidden = shape
    want = (rows // len(parts), hidden)
    for p in parts:
        if len(p) != experts or any(tuple(m.shape) != want for m in p):
            raise ValueError(f"{name} must hold {experts} experts of {want}")
    t = parts[0]
    if (len(parts) == 1 and not interleave and isinstance(t, torch.Tensor)
            and t.dtype == torch.bfloat16 and t.is_contiguous()):  # fmt: skip
        return torch.nn.Parameter(t.detach(), requires_grad=False)
    out = torch.empty(shape, dtype=torch.bfloat16, device=parts[0][0].device)
    for e in range(experts):
        piece = torch.cat([p[e] for p in parts]) if len(parts) > 1 else parts[0][e]
        if interleave:
            from ..kernels.gated_layout import interleave_gate_up

            piece = interleave_gate_up(piece)
        out[e].copy_(piece)
    return torch.nn.Parameter(out, requires_grad=False)


class MoE(torch.nn.Module):
    """An inference MoE layer: a router (``Linear(hidden, experts)``, no bias), top-k routing
    (:func:`~pearl_moe.moe.routing.select_experts`: softmax or sigmoid scores, DeepSeek-V3's
    grouped top-k with a correction bias and a routed scaling factor), the experts' gated MLP on
    the grouped GEMMs (:func:`moe_forward`) and optionally shared experts (a dense gated MLP every
    token runs, scaled by ``sigmoid(x @ shared_gate^T)`` where the model has that gate). No
    gradients: the kernels have no backward pass.

    The arguments are ``MoE(hidden, intermediate, experts, top_k, ...)``, this order (vLLM's
    ``FusedMoE`` and SonicMoE take ``(num_experts, top_k, hidden, intermediate)``: name them
    when in doubt), every later one by keyword: the routing (``score``, ``renormalize``,
    ``n_group``, ``topk_group``, ``routed_scaling`` as :func:`select_experts` takes them;
    ``correction_bias=True`` holds a bias buffer), the shared experts (``shared_intermediate``,
    0 for none; ``shared_gate``), ``expert_map``, ``router_dtype``, ``return_router_logits``,
    ``activation``, ``backend``, ``device``, ``gate_up_layout``. A fresh layer is randomly
    initialised; a checkpoint's tensors make one without a copy (:meth:`from_weights`); a Hugging
    Face block converts with :func:`pearl_moe.moe.hf.from_hf`.

    ``forward(x, check=True)``: ``x`` of any leading shape ``(..., hidden)``, output of the same
    shape (and the router logits with ``return_router_logits``, as Mixtral's block in
    transformers 4 returns them). ``check=True`` syncs with the host once a call (the expert ids'
    range); ``layer(x, check=False)`` reads nothing back and can be captured in a CUDA graph. The
    router runs in its weight's dtype (bf16, or ``router_dtype=torch.float32`` as DeepSeek-V3
    keeps it) like the model it comes from. ``expert_map`` (expert parallelism): the router
    scores the global experts and the layer holds the mapped ones (:func:`moe_forward`).
    ``gate_up_layout="interleaved"`` keeps ``w_gate_up`` in the fused epilogue's layout
    (``from_weights`` converts), so that the pearl backend fuses the activation.
    """

    def __init__(
        self, hidden: int, intermediate: int, experts: int, top_k: int, *,
        activation: str = "swiglu", renormalize: bool = True, score: str = "softmax",
        n_group: int = 1, topk_group: int = 1, routed_scaling: float = 1.0,
        correction_bias: bool = False, shared_intermediate: int = 0, shared_gate: bool = False,
        expert_map=None, router_dtype=torch.bfloat16, return_router_logits: bool = False,
        backend: str = "auto", device=None, gate_up_layout: str = "concat",
    ):  # fmt: skip
        super().__init__()
        if gate_up_layout not in GATE_UP_LAYOUTS:
            raise ValueError(
                f"gate_up_layout must be one of {GATE_UP_LAYOUTS}, got {gate_up_layout!r}"
            )
        for name, value in (
            ("hidden", hidden), ("intermediate", intermediate), ("experts", experts),
            ("top_k", top_k),
        ):  # fmt: skip
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if expert_map is not None:
            expert_map = torch.as_tensor(expert_map, device=device)
            _check_expert_map(expert_map, expert_map.device)
            if expert_map.device.type != "meta":  # its values, once, on the host
                check_ids(expert_map[:0], experts, expert_map)
        choosable = experts if expert_map is None else len(expert_map)
        if top_k > choosable:
            raise ValueError(f"top_k ({top_k}) exceeds the {choosable} experts")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        check_routing(choosable, top_k, score, n_group, topk_group)
        if gate_up_layout == "interleaved" and intermediate % 8:
            raise ValueError(
                f"the interleaved layout needs intermediate % 8 == 0, got {intermediate}"
            )
        if not isinstance(shared_intermediate, int) or shared_intermediate < 0:
            raise ValueError(f"shared_intermediate must be >= 0, got {shared_intermediate!r}")
        if shared_gate and not shared_intermediate:
            raise ValueError("shared_gate gates the shared experts: give shared_intermediate > 0")
        self.gate_up_layout, self.top_k, self.activation = gate_up_layout, top_k, activation
        self.backend, self.return_router_logits = backend, return_router_logits
        self.routing = dict(score=score, renormalize=renormalize, n_group=n_group,
                            topk_group=topk_group, scaling=routed_scaling)  # fmt: skip
        self.router = torch.nn.Linear(hidden, choosable, bias=False, device=device,
                                      dtype=router_dtype)  # fmt: skip
        self.router.weight.requires_grad_(False)

        def frozen(*shape):
            empty = torch.empty(*shape, device=device, dtype=torch.bfloat16)
            return torch.nn.Parameter(empty, requires_grad=False)

        self.w_gate_up = frozen(experts, 2 * intermediate, hidden)
        self.w_down = frozen(experts, hidden, intermediate)
        bias = torch.zeros(choosable, device=device) if correction_bias else None
        self.register_buffer("correction_bias", bias)
        self.register_buffer("expert_map", expert_map)
        shared = shared_intermediate > 0
        self.shared_gate_up = frozen(2 * shared_intermediate, hidden) if shared else None
        self.shared_down = frozen(hidden, shared_intermediate) if shared else None
        self.shared_gate = frozen(1, hidden) if shared and shared_gate else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights ~ N(0, 1 / fan_in): unit-scale activations through the layer."""
        with torch.no_grad():
            for w in self.parameters():
                w.normal_(0.0, w.shape[-1] ** -0.5)

    @classmethod
    def from_weights(
        cls, router_weight, w_down, *, w_gate_up=None, w_gate=None, w_up=None, top_k: int,
        correction_bias=None, shared_gate_up=None, shared_down=None, shared_gate=None,
        router_dtype=torch.bfloat16, **kwargs,
    ) -> MoE:  # fmt: skip
        """A layer holding a checkpoint's tensors: ``router_weight`` ``(experts, hidden)``,
        ``w_down`` ``(experts, hidden, intermediate)``, and either ``w_gate_up`` ``(experts, 2 x
        intermediate, hidden)`` as ``[gate; up]`` or ``w_gate`` and ``w_up`` ``(experts,
        intermediate, hidden)`` each (a checkpoint's ``w1`` and ``w3``); the expert tensors may
        also be sequences of per-expert matrices. Optional: ``correction_bias`` ``(experts,)``
        (DeepSeek-V3), the shared experts' ``shared_gate_up`` ``(2 x shared intermediate,
        hidden)``, ``shared_down`` and ``shared_gate`` ``(1, hidden)``. ``kwargs`` go to
        :class:`MoE`.

        A tensor already in the layer's dtype and layout is held, not copied (the layer shares its
        memory); any other is converted into one new tensor, expert by expert, so the peak
        stays within one copy of the weights. The router weight is kept in ``router_dtype``."""
        if (w_gate_up is None) == (w_gate is None and w_up is None):
            raise ValueError("give either w_gate_up or both w_gate and w_up")
        if w_gate_up is None and (w_gate is None or w_up is None):
            raise ValueError("w_gate and w_up must both be given, (experts, intermediate, hidden)")
        if not isinstance(router_weight, torch.Tensor) or router_weight.dim() != 2:
            raise ValueError("router_weight must be a 2-D tensor (experts, hidden)")
        first = (w_gate_up if w_gate_up is not None else w_gate)[0]
        if not isinstance(first, torch.Tensor) or first.dim() != 2:
            raise ValueError("the expert weights must be (experts, rows, hidden)")
        experts, hidden = len(w_down), first.shape[1]
        inter = first.shape[0] // 2 if w_gate_up is not None else first.shape[0]
        shared_i = 0 if shared_gate_up is None else shared_gate_up.shape[0] // 2
        if shared_i and shared_down is None:
            raise ValueError("shared_gate_up needs shared_down")
        if not shared_i and (shared_down is not None or shared_gate is not None):
            raise ValueError(
                "shared_down and shared_gate belong to shared experts: give shared_gate_up"
            )
        expert_map = kwargs.pop("expert_map", None)
        layer = cls(hidden, inter, experts, top_k, device="meta", router_dtype=router_dtype,
                    correction_bias=correction_bias is not None, shared_intermediate=shared_i,
                    shared_gate=shared_gate is not None, expert_map=expert_map,
                    **kwargs)  # fmt: skip
        interleave = layer.gate_up_layout == "interleaved"
        gate_up = (w_gate_up,) if w_gate_up is not None else (w_gate, w_up)
        shape = (experts, 2 * inter, hidden)
        layer.w_gate_up = _expert_param(gate_up, "w_gate_up", shape, interleave)
        layer.w_down = _expert_param((w_down,), "w_down", (experts, hidden, inter))
        routed = layer.router.weight.shape[0]
        layer.router.weight = _param(router_weight, "router_weight", (routed, hidden),
                                     router_dtype)  # fmt: skip
        if correction_bias is not None:
            bias = _param(correction_bias, "correction_bias", (routed,), torch.float32)
            layer.correction_bias = bias.data
        if expert_map is not None:
            layer.expert_map = torch.as_tensor(expert_map, device=layer.w_down.device)
            check_ids(layer.expert_map[:0], experts, layer.expert_map)  # its values, once
        if shared_i:
            layer.shared_gate_up = _param(shared_gate_up, "shared_gate_up", (2 * shared_i, hidden))
            layer.shared_down = _param(shared_down, "shared_down", (hidden, shared_i))
            if shared_gate is not None:
                layer.shared_gate = _param(shared_gate, "shared_gate", (1, hidden))
        return layer

    def route(self, flat):
        """``(router_logits, weights, ids)`` of tokens ``flat`` ``(tokens, hidden)``: the router
        in its weight's dtype (the model's), then :func:`select_experts` with this layer's
        scoring."""
        w = self.router.weight
        logits = torch.nn.functional.linear(flat.to(w.dtype), w)
        weights, ids = select_experts(logits, self.top_k, **self.routing, bias=self.correction_bias)
        return logits, weights, ids

    def forward(self, x, check: bool = True):
        shape = x.shape
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or shape[-1] != self.w_down.shape[1]:
            raise ValueError(f"x must be (..., {self.w_down.shape[1]}), got {tuple(shape)}")
        flat = x.reshape(-1, shape[-1])
        with torch.no_grad():
            backend = _check_call(flat, self.w_gate_up, self.w_down, self.top_k, self.activation,
                                  self.backend, self.gate_up_layout, "copy")  # fmt: skip
            logits, weights, ids = self.route(flat)
            args = (flat, self.w_gate_up, self.w_down, ids, weights, self.expert_map,
                    self.activation, backend, check, self.gate_up_layout, "copy", None)  # fmt: skip
            if torch.compiler.is_compiling():
                out = torch.ops.pearl_moe.moe_experts(*args)
            else:
                out = _experts(*args)[0]
            if self.shared_gate_up is not None:
                out = out + self._shared(flat)
            out = out.view(shape)
        return (out, logits) if self.return_router_logits else out

    def _shared(self, flat):
        """The shared experts' output: ``down(act(gate) * up)``, gated by ``sigmoid(x @ g^T)``
        where the model has that gate (Qwen2-MoE)."""
        F = torch.nn.functional
        h = F.linear(flat, self.shared_gate_up)
        out = F.linear(gated(h, self.activation).to(flat.dtype), self.shared_down)
        if self.shared_gate is not None:
            out = torch.sigmoid(F.linear(flat, self.shared_gate)) * out
        return out

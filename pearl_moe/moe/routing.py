"""Routing of an MoE layer: the router's choice of experts, and the metadata that sorts the routed
rows by expert, computed on the device.

:func:`select_experts` turns router logits into each token's ``top_k`` experts and weights, with
the scorings of the common checkpoints: softmax top-k with or without renormalisation (Mixtral,
Qwen-MoE), sigmoid scores, and DeepSeek-V3's grouped top-k with a score correction bias and a
routed scaling factor.

A layer's grouped GEMMs need the routed rows sorted by expert. From the router's ``topk_ids``
``(tokens, top_k)`` :func:`route_topk` derives, with tensor operations only (no copy to the host,
so a CUDA graph can capture them):

* ``counts`` and ``offsets``: rows per expert and their end offsets (torch ``grouped_mm``
  convention), from a ``scatter_add`` of ones (``torch.bincount`` would size its output on the
  host);
* ``token_of_row``: the gather index. Sorted row ``r`` holds token ``token_of_row[r]``, so the gate+up
  GEMM's A is ``x[token_of_row]``;
* ``row_of_slot``: the scatter index. Token ``t``'s ``j``-th choice is sorted row
  ``row_of_slot[t, j]``; the combine reads the down GEMM's rows back through it;
* ``weight_of_row``: the router weight of every sorted row (float32).

The sort is stable, so within an expert rows keep token order, and the whole layout is a pure
function of ``topk_ids``: the layer is deterministic. :func:`route_and_gather` also returns the
gathered rows ``x[token_of_row]``; at decode the layout's one kernel launch copies them too.

**Masked choices.** Under expert parallelism a GPU holds some of the experts and every token has
choices that belong to another GPU: vLLM's ``expert_map`` maps them to -1 (:func:`local_ids`). A
choice whose id is outside ``[0, experts)`` is *masked*: its row is sorted after every expert, no
GEMM computes it, and its ``row_of_slot`` is -1, which the combine skips, so it adds exactly 0 to
its token's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import glue_kernels

__all__ = [
    "Routing",
    "route_topk",
    "route_and_gather",
    "gathers_in_one_launch",
    "select_experts",
    "local_ids",
    "check_topk",
    "SCORES",
]

#: How router logits become scores (:func:`select_experts`).
SCORES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class Routing:
    """Where each of the ``tokens x top_k`` routed rows goes (see the module docstring)."""

    topk_ids: object  # (tokens, top_k) int64
    counts: object  # (experts,) int32
    offsets: object  # (experts,) int32 end offsets
    token_of_row: object  # (rows,) int64
    row_of_slot: object  # (tokens, top_k) int64, -1 for a masked choice
    weight_of_row: object  # (rows,) float32

    @property
    def tokens(self) -> int:
        return self.topk_ids.shape[0]

    @property
    def top_k(self) -> int:
        return self.topk_ids.shape[1]

    @property
    def experts(self) -> int:
        return self.counts.shape[0]

    @property
    def rows(self) -> int:
        return self.token_of_row.shape[0]


def check_routing(experts: int, top_k, score: str = "softmax", n_group=1, topk_group=1) -> None:
    """``ValueError`` unless :func:`select_experts` can route over ``experts`` experts with these
    arguments (the layer asks it when it is built, before any token comes)."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be an integer from 1 to the {experts} experts, got {top_k!r}")
    if not (isinstance(n_group, int) and n_group >= 1 and experts % n_group == 0):
        raise ValueError(f"n_group must divide the {experts} experts, got {n_group!r}")
    if n_group == 1 and topk_group != 1:
        raise ValueError(f"topk_group={topk_group!r} needs groups of experts (n_group > 1)")
    if n_group > 1 and not (
        isinstance(topk_group, int) and 1 <= topk_group <= n_group
        and top_k <= topk_group * (experts // n_group) and experts // n_group >= 2
    ):  # fmt: skip
        raise ValueError(
            f"topk_group must pick 1 to {n_group} groups of {experts // n_group} (at least 2) "
            f"experts holding top_k={top_k}, got {topk_group!r}"
        )


def select_experts(
    router_logits,
    top_k: int,
    score: str = "softmax",
    renormalize: bool = True,
    *,
    bias=None,
    n_group: int = 1,
    topk_group: int = 1,
    scaling: float = 1.0,
):
    """The ``top_k`` experts of each token and their weights: ``(weights float32, ids int64)``.

    ``score``: ``softmax`` over all experts (Mixtral, Qwen-MoE) or an independent ``sigmoid`` per
    expert (DeepSeek-V3), computed in float32. ``bias`` ``(experts,)`` is added to the scores for
    the choice only (DeepSeek-V3's ``e_score_correction_bias``); the weights are the scores. With
    ``n_group > 1`` the experts form ``n_group`` equal groups, each group is scored by the sum of
    its two best experts, and the choice is made within the ``topk_group`` best groups. With
    ``renormalize`` the chosen weights are divided by their sum (Mixtral, Qwen3-MoE's
    ``norm_topk_prob``); then they are multiplied by ``scaling`` (``routed_scaling_factor``).

    The operations and their order are those of the Hugging Face blocks, so the same logits give
    the same choices."""
    import torch

    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError("router_logits must be a 2-D tensor (tokens, experts)")
    experts = router_logits.shape[1]
    check_routing(experts, top_k, score, n_group, topk_group)
    if bias is not None and tuple(getattr(bias, "shape", ())) != (experts,):
        raise ValueError(f"bias must be a tensor of shape ({experts},)")
    logits = router_logits.float()
    scores = torch.softmax(logits, dim=-1) if score == "softmax" else logits.sigmoid()
    choice = scores if bias is None else scores + bias
    if n_group > 1:
        per_group = choice.view(-1, n_group, experts // n_group)
        group_scores = per_group.topk(2, dim=-1)[0].sum(dim=-1)
        groups = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, groups, True)
        keep = keep.unsqueeze(-1).expand_as(per_group).reshape(-1, experts)
        choice = choice.masked_fill(~keep, float("-inf"))
    ids = torch.topk(choice, top_k, dim=-1, sorted=n_group == 1)[1]  # sorted as the blocks do
    weights = scores.gather(1, ids)
    if renormalize:  # + 1e-20 as DeepSeek-V3; below a float32 ulp of any softmax top-k sum
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    if scaling != 1.0:
        weights = weights * scaling
    return weights, ids


def local_ids(topk_ids, expert_map):
    """This GPU's expert ids of the global ``topk_ids``: ``expert_map`` ``(global experts,)`` holds
    each global expert's local id, -1 for an expert held elsewhere (vLLM's ``expert_map``). An id
    outside ``[0, global experts)`` maps to -1 too. Tensor operations only (capturable)."""
    import torch

    inside = (topk_ids >= 0) & (topk_ids < expert_map.shape[0])
    safe = torch.where(inside, topk_ids, 0).long()
    return torch.where(inside, expert_map[safe].long(), -1)


def check_topk(topk_ids, topk_weights) -> None:
    """``ValueError`` unless ``topk_ids`` is a 2-D integer tensor and ``topk_weights`` a floating
    tensor of its shape on its device (nothing read from the device)."""
    import torch

    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.shape[1] < 1:
        raise ValueError("topk_ids must be a 2-D tensor (tokens, top_k) with top_k >= 1")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if not isinstance(topk_weights, torch.Tensor) or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights must be a tensor of topk_ids' shape {tuple(topk_ids.shape)}, got "
            f"{tuple(getattr(topk_weights, 'shape', ()))}"
        )
    if not topk_weights.is_floating_point():
        raise ValueError(f"topk_weights must be floating point, got {topk_weights.dtype}")
    if topk_weights.device != topk_ids.device:
        raise ValueError("topk_ids and topk_weights must be on one device")


def check_ids(ids, experts: int, expert_map=None) -> None:
    """``ValueError`` unless every id is in ``[-1, experts)`` (-1: masked); with ``expert_map``,
    every id in ``[-1, global experts)`` and every value of the map in ``[-1, experts)``. Reads
    their smallest and largest values back to the host: one sync."""
    import torch

    checks = [("expert id", ids, experts if expert_map is None else expert_map.shape[0])]
    if expert_map is not None:
        checks.append(("expert_map value", expert_map, experts))
    checks = [c for c in checks if c[1].numel()]
    if not checks:
        return
    ranges = torch.stack([v.long() for _, t, _ in checks for v in torch.aminmax(t)]).tolist()
    for i, (what, _, limit) in enumerate(checks):
        low, high = ranges[2 * i : 2 * i + 2]
        if low < -1 or high >= limit:
            raise ValueError(
                f"{what} {low if low < -1 else high} is out of range: the layer has {limit} "
                "experts (-1 marks a masked choice)"
            )


def route_topk(
    topk_ids, topk_weights, experts: int, check: bool = True, kernels: bool | None = None
) -> Routing:
    """The :class:`Routing` of ``topk_ids`` ``(tokens, top_k)`` over ``experts`` experts, with
    ``topk_weights`` (same shape) as the router weights.

    ``check`` (default) also verifies that every id is in ``[-1, experts)`` (-1 marks a masked
    choice); that reads the ids on the host (one sync), so a captured CUDA graph passes
    ``check=False``: then every id outside ``[0, experts)`` is a masked choice (module docstring).

    ``kernels``: compute the layout with the counting-sort kernels of
    :mod:`pearl_moe.moe.glue_kernels` (one or two launches) instead of tensor operations (a
    dozen, with a radix sort). ``None`` (default): on a CUDA device when Triton is there, up to
    :data:`~pearl_moe.moe.glue_kernels.MAX_KERNEL_ROWS` routed rows. Both give the same tensors.
    """
    return _route(topk_ids, topk_weights, experts, check, kernels)[0]


def route_and_gather(
    topk_ids, topk_weights, experts: int, x, check: bool = True, kernels: bool | None = None,
    pdl: bool = False,
):  # fmt: skip
    """:func:`route_topk` and the gate+up GEMM's A, the routed rows ``x[token_of_row]`` sorted by
    expert: ``(Routing, A)``, ``A`` ``(tokens x top_k, hidden)`` in ``x``'s dtype.

    Where the layout takes one launch of the kernels (up to
    :data:`~pearl_moe.moe.glue_kernels.BLOCK_ROWS` routed rows: decode), that launch also copies
    the rows, so the gather costs no launch of its own; beyond, the copy is an ``index_select``
    after the layout's launches. ``check`` and ``kernels`` as in :func:`route_topk`; ``pdl``:
    the kernels' last launch lets the next kernel, a programmatic dependent, launch at once
    (:func:`pearl_moe.moe.glue_kernels.route_rows`)."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("x must be a 2-D tensor (tokens, hidden)")
    routing, A = _route(topk_ids, topk_weights, experts, check, kernels, x, pdl)
    if A is None:
        A = x.index_select(0, routing.token_of_row)
    return routing, A


def gathers_in_one_launch(topk_ids, kernels: bool | None = None) -> bool:
    """Whether :func:`route_and_gather` on these choices copies the rows in the layout's one
    kernel launch (the kernels run, and the routed rows fit one chunk of
    :data:`~pearl_moe.moe.glue_kernels.BLOCK_ROWS`)."""
    if kernels is None:
        kernels = _kernels_by_default(topk_ids)
    return bool(kernels) and topk_ids.numel() <= glue_kernels.BLOCK_ROWS


def _kernels_by_default(topk_ids) -> bool:
    return (
        topk_ids.is_cuda
        and topk_ids.numel() <= glue_kernels.MAX_KERNEL_ROWS
        and glue_kernels.available()
    )


def _route(topk_ids, topk_weights, experts: int, check: bool, kernels: bool | None, x=None,
           pdl: bool = False):  # fmt: skip
    """:func:`route_topk`'s work: ``(Routing, A)``, ``A`` the rows of ``x`` gathered by the
    kernels' one launch where they ran it with ``x``, else None."""
    import torch

    check_topk(topk_ids, topk_weights)
    if x is not None and x.shape[0] != topk_ids.shape[0]:
        raise ValueError(f"x has {x.shape[0]} tokens, topk_ids {topk_ids.shape[0]}")
    if x is not None and x.device != topk_ids.device:
        raise ValueError(f"x is on {x.device}, topk_ids on {topk_ids.device}: one device")
    if not isinstance(experts, int) or experts < 1:
        raise ValueError(f"experts must be a positive integer, got {experts!r}")
    if check:
        check_ids(topk_ids, experts)
    tokens, top_k = topk_ids.shape
    if kernels is None:
        kernels = _kernels_by_default(topk_ids)
    if kernels:
        one_launch = x is not None and gathers_in_one_launch(topk_ids, kernels)
        ids_long = topk_ids.long()  # before the routing: the gate+up GEMM may follow it at once
        counts, offsets, token_of_row, row_of_flat, weight_of_row, A = glue_kernels.route_rows(
            topk_ids.reshape(-1).contiguous(), topk_weights.reshape(-1).contiguous(), experts,
            top_k, x=x if one_launch else None, pdl=pdl,
        )  # fmt: skip
        routing = Routing(
            topk_ids=ids_long,
            counts=counts,
            offsets=offsets,
            token_of_row=token_of_row,
            row_of_slot=row_of_flat.view(tokens, top_k),
            weight_of_row=weight_of_row,
        )
        return routing, A
    ids = topk_ids.reshape(-1).long()
    device = ids.device
    counts = torch.zeros(experts + 1, dtype=torch.int32, device=device)
    # masked ids land in the extra bin, which no expert reads
    valid = (ids >= 0) & (ids < experts)
    safe = torch.where(valid, ids, experts)
    counts.scatter_add_(0, safe, torch.ones_like(safe, dtype=torch.int32))
    counts = counts[:experts]
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    order = torch.sort(safe, stable=True).indices  # sorted row -> flat (token, slot)
    rows = ids.numel()
    row_of_flat = torch.empty(rows, dtype=torch.int64, device=device)
    row_of_flat[order] = torch.arange(rows, device=device)
    routing = Routing(
        topk_ids=ids.view(tokens, top_k),
        counts=counts,
        offsets=offsets,
        token_of_row=torch.div(order, top_k, rounding_mode="floor"),
        row_of_slot=torch.where(valid, row_of_flat, -1).view(tokens, top_k),
        weight_of_row=topk_weights.reshape(-1)[order].float(),
    )
    return routing, None

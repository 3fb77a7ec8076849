"""Routing metadata of an MoE layer, computed on the device from the router's top-k choices.

A layer's grouped GEMMs need the routed rows sorted by expert. From the router's ``topk_ids``
``(tokens, top_k)`` this module derives, with tensor operations only (no copy to the host, so a
CUDA graph can capture them):

* ``counts`` and ``offsets``: rows per expert and their end offsets (torch ``grouped_mm``
  convention), from a ``scatter_add`` of ones (``torch.bincount`` would size its output on the
  host);
* ``token_of_row``: the gather index. Sorted row ``r`` holds token ``token_of_row[r]``, so the gate+up
  GEMM's A is ``x[token_of_row]``;
* ``row_of_slot``: the scatter index. Token ``t``'s ``j``-th choice is sorted row
  ``row_of_slot[t, j]``; the combine reads the down GEMM's rows back through it;
* ``weight_of_row``: the router weight of every sorted row (float32).

The sort is stable, so within an expert rows keep token order, and the whole layout is a pure
function of ``topk_ids``: the layer is deterministic. Every routed row is local here (one GPU holds
all experts); splitting experts across GPUs (expert parallelism) is the caller's dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import glue_kernels

__all__ = ["Routing", "route_topk", "select_experts", "SCORES"]

#: How router logits become the weights of the chosen experts (:func:`select_experts`).
SCORES = ("softmax",)


@dataclass(frozen=True)
class Routing:
    """Where each of the ``tokens x top_k`` routed rows goes (see the module docstring)."""

    topk_ids: object  # (tokens, top_k) int64
    counts: object  # (experts,) int32
    offsets: object  # (experts,) int32 end offsets
    token_of_row: object  # (rows,) int64
    row_of_slot: object  # (tokens, top_k) int64
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


def select_experts(router_logits, top_k: int, score: str = "softmax", renormalize: bool = True):
    """The ``top_k`` experts of each token and their weights: ``(weights float32, ids int64)``.

    ``softmax``: probabilities over all experts, the ``top_k`` largest kept; with ``renormalize``
    they are divided by their sum (Mixtral, Qwen3-MoE), without it they stay as they are.
    """
    import torch

    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError("router_logits must be a 2-D tensor (tokens, experts)")
    experts = router_logits.shape[1]
    if not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be an integer from 1 to the {experts} experts, got {top_k!r}")
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def route_topk(
    topk_ids, topk_weights, experts: int, check: bool = True, kernels: bool | None = None
) -> Routing:
    """The :class:`Routing` of ``topk_ids`` ``(tokens, top_k)`` over ``experts`` experts, with
    ``topk_weights`` (same shape) as the router weights.

    ``check`` (default) also verifies that every id is in ``[0, experts)``; that reads the ids on
    the host (one sync), so a captured CUDA graph passes ``check=False`` (an id out of range then
    counts for no expert and its row is never computed).

    ``kernels``: compute the layout with the counting-sort kernels of
    :mod:`pearl_moe.moe.glue_kernels` (one or two launches) instead of tensor operations (a
    dozen, with a radix sort). ``None`` (default): on a CUDA device when Triton is there, up to
    :data:`~pearl_moe.moe.glue_kernels.MAX_KERNEL_ROWS` routed rows. Both give the same tensors.
    """
    import torch

    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2:
        raise ValueError("topk_ids must be a 2-D tensor (tokens, top_k)")
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
    if not isinstance(experts, int) or experts < 1:
        raise ValueError(f"experts must be a positive integer, got {experts!r}")
    if check and topk_ids.numel():
        low, high = int(topk_ids.min()), int(topk_ids.max())
        if low < 0 or high >= experts:
            bad = low if low < 0 else high
            raise ValueError(f"expert id {bad} is out of range: the layer has {experts} experts")
    tokens, top_k = topk_ids.shape
    if kernels is None:
        kernels = (
            topk_ids.is_cuda
            and topk_ids.numel() <= glue_kernels.MAX_KERNEL_ROWS
            and glue_kernels.available()
        )
    if kernels:
        counts, offsets, token_of_row, row_of_flat, weight_of_row = glue_kernels.route_rows(
            topk_ids.reshape(-1).contiguous(), topk_weights.reshape(-1).contiguous(), experts, top_k
        )
        return Routing(
            topk_ids=topk_ids.long(),
            counts=counts,
            offsets=offsets,
            token_of_row=token_of_row,
            row_of_slot=row_of_flat.view(tokens, top_k),
            weight_of_row=weight_of_row,
        )
    ids = topk_ids.reshape(-1).long()
    device = ids.device
    counts = torch.zeros(experts + 1, dtype=torch.int32, device=device)
    # ids out of range (unchecked) land in the extra bin, which no expert reads
    safe = torch.where((ids >= 0) & (ids < experts), ids, experts)
    counts.scatter_add_(0, safe, torch.ones_like(safe, dtype=torch.int32))
    counts = counts[:experts]
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    order = torch.sort(safe, stable=True).indices  # sorted row -> flat (token, slot)
    rows = ids.numel()
    row_of_flat = torch.empty(rows, dtype=torch.int64, device=device)
    row_of_flat[order] = torch.arange(rows, device=device)
    return Routing(
        topk_ids=ids.view(tokens, top_k),
        counts=counts,
        offsets=offsets,
        token_of_row=torch.div(order, top_k, rounding_mode="floor"),
        row_of_slot=row_of_flat.view(tokens, top_k),
        weight_of_row=topk_weights.reshape(-1)[order].float(),
    )

"""Host-side setup shared by the sm_90a and sm_100a kernels.

* turning torch tensors into CuTe DSL pointers (all kernels take raw pointers plus the run-time row
  count; ``n``, ``k`` and the expert count are compile-time constants);
* the offsets tensor on the device, in torch ``grouped_mm`` convention (E end offsets), viewed
  without a copy when the caller passed ``cu_seqlens`` (E + 1 entries, leading 0);
* the launch of the naive per-expert loop (stage 1 of both architectures);
* a plain-Python model of stage 2's grid (:func:`grouped_grid`: one CTA per (m tile, n tile,
  expert)), used by notebooks; the kernels compute it inside their host ``__call__`` (rows > 0);
* a plain-Python model of the tile scheduler (:func:`schedule_tiles`) that the device scheduler
  in :mod:`pearl_moe.kernels.scheduler` must agree with, used by tests and notebooks.
"""

from __future__ import annotations

from ..config import GemmConfig

__all__ = [
    "bf16_ptr",
    "placeholder_ptr",
    "launch_per_expert",
    "i32_ptr",
    "device_end_offsets",
    "tile_in_expert",
    "cdiv",
    "grouped_grid",
    "schedule_tiles",
    "cuda_stream",
]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def bf16_ptr(t, offset_elems: int = 0):
    """A 16-byte-aligned global bf16 pointer to ``t``'s storage plus ``offset_elems`` elements."""
    import cutlass
    import cutlass.cute as cute

    addr = t.data_ptr() + 2 * offset_elems
    return cute.runtime.make_ptr(cutlass.BFloat16, addr, cute.AddressSpace.gmem, assumed_align=16)


def i32_ptr(t):
    import cutlass
    import cutlass.cute as cute

    return cute.runtime.make_ptr(
        cutlass.Int32, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=4
    )


def placeholder_ptr(dtype=None, align: int = 16):
    """A null global pointer of ``dtype`` (default bf16) for ``cute.compile`` without tensors.

    Every kernel is compiled against pointers, so one compiled kernel serves any data; the
    alignment promised here is what the kernel may assume (TMA needs 16 bytes).
    """
    import cutlass
    import cutlass.cute as cute

    dtype = dtype or cutlass.BFloat16
    return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)


def launch_per_expert(compiled, A, W, out, host_offsets, stream) -> None:
    """The naive MoE loop of stage 1, for both architectures: one dense-GEMM launch per expert
    with rows, each on that expert's slice of A, W and out (rows sliced on the host)."""
    k = A.shape[1]
    n = W.shape[1]
    start = 0
    for e, end in enumerate(host_offsets):
        rows = end - start
        if rows > 0:
            compiled(
                bf16_ptr(A, start * k),
                bf16_ptr(W, e * n * k),
                bf16_ptr(out, start * n),
                rows,
                stream,
            )
        start = end


def cuda_stream(device=None):
    """The torch current stream as a ``CUstream`` (so kernels are captured by CUDA graphs)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream(device).cuda_stream)


def device_end_offsets(offsets, experts: int):
    """``offsets`` as E int32 end offsets on its device, a view (no copy, no sync) when possible."""
    import torch

    if offsets.dtype != torch.int32:
        offsets = offsets.to(torch.int32)
    if offsets.numel() == experts + 1:
        offsets = offsets[1:]  # cu_seqlens: drop the leading 0
    return offsets.contiguous()


def grouped_grid(rows: int, n: int, experts: int, config: GemmConfig) -> tuple[int, int, int]:
    """Stage 2: CTA (x, y, z) = (m tile, n tile, expert). No expert has more than ``rows`` rows,
    so ``cdiv(rows, tile_m)`` m tiles always suffice; CTAs past their expert's rows exit at once."""
    return (max(1, cdiv(rows, config.tile_m)), cdiv(n, config.tile_n), experts)


def tile_in_expert(local: int, m_tiles: int, n_tiles: int, n_group: int = 0) -> tuple[int, int]:
    """``(m_tile, n_tile)`` of an expert's tile number ``local``, in the order of
    ``GemmConfig.n_group`` (the plain-Python twin of
    :meth:`pearl_moe.kernels.scheduler.TileScheduler.decode`): the m tile fastest (0), or groups
    of ``n_group`` n tiles with the n tile fastest inside a group and every other group's m tiles
    in reverse."""
    if not n_group:
        return local % m_tiles, local // m_tiles
    group, in_group = divmod(local, m_tiles * n_group)
    width = n_group
    if group == (n_tiles - 1) // n_group:  # the last group may be narrower
        width = n_tiles - (n_tiles - 1) // n_group * n_group
    m_tile, n_in = divmod(in_group, width)
    if group % 2 == 1:
        m_tile = m_tiles - 1 - m_tile
    return m_tile, group * n_group + n_in


def schedule_tiles(counts, n: int, tile_m: int, tile_n: int, ctas: int | None = None,
                   n_group: int = 0):  # fmt: skip
    """The (expert, m tile, n tile, first row, valid rows) work list in scheduler order.

    Tiles are numbered expert by expert; inside an expert the m tile varies fastest (``n_group``
    0), so CTAs that run at the same time share one n tile of the expert's weights (one HBM read,
    several L2 hits), or in groups of ``n_group`` n tiles.
    With ``ctas`` given, returns one list per CTA (CTA ``c`` takes tiles ``c, c + ctas, ...``);
    ``n_group``: the order inside an expert (:func:`tile_in_expert`).
    """
    n_tiles = cdiv(n, tile_n)
    work = []
    start = 0
    for e, rows in enumerate(counts):
        m_tiles = cdiv(rows, tile_m)
        for t in range(m_tiles * n_tiles):
            m_tile, n_tile = tile_in_expert(t, m_tiles, n_tiles, n_group)
            first = start + m_tile * tile_m
            work.append((e, m_tile, n_tile, first, min(tile_m, start + rows - first)))
        start += rows
    if ctas is None:
        return work
    return [work[c::ctas] for c in range(ctas)]

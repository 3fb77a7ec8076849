"""The layer's two glue passes as Triton kernels: the routing metadata and the weighted combine.

Between and around its grouped GEMMs an MoE layer needs two small passes. In tensor operations
they cost more than their bytes: on the H200 the routing metadata (a dozen torch kernels with a
radix sort) took 27 us at 1 token and 57 us at 64 for GLM 5.3, against its fused gate+up GEMM's
104 us and 376 us; the combine (gather, cast, multiply, reduce: four passes over the down GEMM's output)
took 16 us at 1 token and 1.65 ms at 4096 tokens, where one read of its input takes about 0.1 ms.
Here each is one or two kernels:

* :func:`route_rows`: a stable counting sort of the ``tokens x top_k`` routed rows by expert. The
  rows are cut into chunks of :data:`BLOCK_ROWS`; each chunk counts its rows per expert (skipped
  when there is one chunk), then each chunk places its rows: sorted row = first row of the expert
  + rows of that expert in earlier chunks + rows of it earlier in this chunk. Integer counts only,
  so the layout is exactly the one a stable sort gives (the torch version in
  :func:`pearl_moe.moe.routing.route_topk` is the reference the tests compare with). Given the
  layer's input ``x``, the placing launch also copies each routed row of ``x`` to its sorted row
  (the gate+up GEMM's A): at decode the gather then costs no launch of its own.
* :func:`combine_rows`: ``out[t] = sum_j w[t, j] * y[row_of_slot[t, j]]`` with the ``top_k``
  terms added in choice order in float32 registers: one read of ``y``, one write of ``out``, the
  same order on every call (deterministic, no atomics). A masked choice (its slot's row -1: an
  expert id outside ``[0, E)``) loads nothing and adds 0.

These are glue, not the course's subject (the grouped GEMM is), so they are written in Triton,
which ships with torch's CUDA wheels; off a GPU, or without Triton, the torch versions run. Triton's
interpreter (``TRITON_INTERPRET=1``) runs these kernels on CPU tensors, which is how the CPU tests
check them.
"""

from __future__ import annotations

import functools
import os

__all__ = ["available", "route_rows", "combine_rows", "BLOCK_ROWS", "BLOCK_HIDDEN"]

#: Routed rows a program sorts at most (fewer, down to 16, when there are fewer rows): its stable
#: rank takes ``BLOCK_ROWS / RANK_STEP`` steps of a ``BLOCK_ROWS x RANK_STEP`` comparison, and up
#: to 32 tokens at top-8 fit one chunk, so one launch.
BLOCK_ROWS = 256
#: Columns of the earlier-in-chunk comparison per step (``BLOCK_ROWS x RANK_STEP`` booleans).
RANK_STEP = 32
#: Chunks' counts a program adds per step when it sums the earlier chunks.
CHUNK_STEP = 8
#: Hidden columns of one combine program (8 bf16 per thread of 4 warps: 16-byte loads); a
#: quarter of it (one warp) below :data:`FEW_TOKENS` tokens.
BLOCK_HIDDEN = 1024
FEW_TOKENS = 64
#: Elements of ``x`` one routing program copies when it also gathers the rows (16k: 32 KB of bf16).
GATHER_ELEMENTS = 16384
#: Most routed rows the routing kernels take (256 chunks: each placement program sums every
#: chunk's counts, so their work grows with the square of the chunks); beyond, the torch version.
MAX_KERNEL_ROWS = 65536


@functools.cache
def available() -> bool:
    """Whether Triton can be imported (torch's CUDA wheels bring it)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError:
        return False
    return True


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _check_device(t) -> None:
    """The kernels run on a CUDA device, or on CPU tensors in Triton's interpreter."""
    if not t.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"the glue kernels run on a CUDA device (or on the CPU in Triton's interpreter, "
            f"TRITON_INTERPRET=1); the tensors are on {t.device}: pass kernels=False"
        )


def _on(device):
    """A context that makes ``device`` the current CUDA device (nothing for CPU tensors)."""
    import contextlib

    import torch

    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _kernels():
    """The Triton kernels (:mod:`pearl_moe.moe._glue_triton`), imported on first use: Triton
    reads ``TRITON_INTERPRET`` when they are defined."""
    from . import _glue_triton as k

    return k.count_chunk, k.place_chunk, k.combine


def _has_gdc() -> bool:
    """Whether this Triton has grid dependency control (``gdc_wait``, 3.4 on); without it the
    glue kernels launch in stream order whatever ``pdl`` asks."""
    from . import _glue_triton

    return _glue_triton.HAS_GDC


def _gather_blocks(block: int, hidden: int) -> tuple[int, int]:
    """``(HBLOCK, CB)`` of the gather in :func:`route_rows`: the columns of ``x`` a program copies
    (about 16k elements of its chunk's ``block`` rows: more programs when there are few rows) and
    the columns of one load (a ``block x CB`` tile of about 4k elements)."""
    hblock = max(64, min(1024, _next_pow2(hidden), GATHER_ELEMENTS // block))
    return hblock, min(hblock, max(16, GATHER_ELEMENTS // 4 // block))


def route_rows(ids, weights, experts: int, top_k: int, x=None, pdl: bool = False):
    """Counting-sort the flat routed rows ``ids`` ``(rows,)`` (expert of each (token, choice),
    int32 or int64, contiguous) by expert, stably. ``weights`` ``(rows,)`` are the router weights.
    Returns ``(counts int32 (experts,), offsets int32 end offsets, token_of_row int64,
    row_of_flat int64, weight_of_row float32, a)``: what :func:`pearl_moe.moe.routing.route_topk`
    needs, equal to its torch version's, and with ``x`` ``(tokens, hidden)`` the gathered rows
    ``a = x[token_of_row]`` ``(rows, hidden)``, copied by the same launch (else ``a`` is None;
    an ``x`` whose columns are strided is first made contiguous, a copy of its own). One launch
    when ``rows <= BLOCK_ROWS``, else two. ``pdl``: the placing launch lets the next kernel (a
    programmatic dependent, the gate+up GEMM) launch at once. It is itself launched in stream
    order: its inputs come from the caller's kernels, whose own launches it cannot vouch for."""
    import torch

    _check_device(ids)
    count_chunk, place_chunk, _ = _kernels()
    pdl = pdl and _has_gdc()
    rows = ids.numel()
    device = ids.device
    block = max(16, min(BLOCK_ROWS, _next_pow2(rows)))  # 16 rows at 1 token and top-8
    chunks = max(1, -(-rows // block))
    bins = _next_pow2(experts + 2)  # the experts, bin E of bad ids, and one of padding
    gather = x is not None
    if gather:
        if x.dim() != 2 or x.shape[0] * top_k != rows or x.device != device:
            raise ValueError(
                f"x must be (tokens, hidden) with {rows} / {top_k} tokens on {device}, got "
                f"{tuple(x.shape)} on {x.device}"
            )
        if x.stride(-1) != 1:
            x = x.contiguous()
        hidden = x.shape[1]
        a = torch.empty(rows, hidden, dtype=x.dtype, device=device)
        hblock, cb = _gather_blocks(block, hidden)
        hblocks = max(1, -(-hidden // hblock))
    else:
        a, hidden, hblock, cb, hblocks = None, 0, 16, 16, 1
    if rows == 0:
        zeros = torch.zeros(experts, dtype=torch.int32, device=device)
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return zeros, zeros.clone(), empty, empty.clone(), empty.float(), a
    # every element of these is written by the kernels (no memset launches)
    counts = torch.empty(experts, dtype=torch.int32, device=device)
    offsets = torch.empty(experts, dtype=torch.int32, device=device)
    token_of_row = torch.empty(rows, dtype=torch.int64, device=device)
    row_of_flat = torch.empty(rows, dtype=torch.int64, device=device)
    weight_of_row = torch.empty(rows, dtype=torch.float32, device=device)
    single = chunks == 1
    hist = torch.empty(1 if single else chunks * (experts + 1), dtype=torch.int32, device=device)
    base = torch.empty(chunks * hblocks * bins, dtype=torch.int32, device=device)
    with _on(device):  # Triton launches on the current device: make it the tensors'
        if not single:
            count_chunk[(chunks,)](ids, hist, rows, E=experts, BINS=bins, BLOCK=block)
        place_chunk[(chunks, hblocks)](
            ids, weights, hist, base, counts, offsets, token_of_row, row_of_flat, weight_of_row,
            x if gather else ids, a if gather else ids, rows, chunks, top_k, hidden,
            x.stride(0) if gather else 0, E=experts, BINS=bins, BLOCK=block,
            STEP=min(RANK_STEP, block), CSTEP=CHUNK_STEP, SINGLE=single, GATHER=gather,
            HBLOCK=hblock, CB=cb, PDL=pdl,
        )  # fmt: skip
    return counts, offsets, token_of_row, row_of_flat, weight_of_row, a


def combine_rows(y, row_of_slot, weight_of_row, pdl: bool = False):
    """``out[t] = sum_j weight_of_row[r] * y[r]`` over ``r = row_of_slot[t, j]`` in choice order,
    in float32, stored in ``y``'s dtype: ``(tokens, hidden)``; ``r = -1`` (a masked choice) adds 0.
    ``y`` ``(rows, hidden)`` and the index tensors contiguous. ``pdl``: a programmatic dependent
    launch, which waits for the kernel before it (the down GEMM) before its first load."""
    import torch

    _check_device(y)
    _, _, combine = _kernels()
    pdl = pdl and _has_gdc()
    tokens, top_k = row_of_slot.shape
    hidden = y.shape[1]
    out = torch.empty(tokens, hidden, dtype=y.dtype, device=y.device)
    if tokens and hidden:
        # few tokens: 256 columns a program (one warp, still 16-byte loads), for more programs
        # in flight; the layer at 1 token and 6144 columns then runs 24 programs, not 6
        block, warps = (BLOCK_HIDDEN, 4) if tokens >= FEW_TOKENS else (BLOCK_HIDDEN // 4, 1)
        grid = (tokens, -(-hidden // block))
        with _on(y.device):
            combine[grid](y, row_of_slot, weight_of_row, out, hidden, TOP_K=top_k,
                          K_POW2=_next_pow2(top_k), BLOCK=block, num_warps=warps, PDL=pdl,
                          **({"launch_pdl": True} if pdl else {}))  # fmt: skip
    return out

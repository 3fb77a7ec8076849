"""The Triton kernels behind :mod:`pearl_moe.moe.glue_kernels` (read that module's docstring).

Imported only when a glue kernel first runs, so that importing the package needs no Triton.
Routed rows fall into ``BINS`` bins: expert ``e`` in bin ``e``, a masked id (outside ``[0, E)``)
in bin ``E`` (sorted after every expert, never computed, its slot's row stored as -1 so that the
combine skips it), and the padding of the last chunk in bin ``BINS - 1 > E``, which nothing
stores.

``PDL``: the routing lets the next kernel (the gate+up GEMM) launch at once
(``gdc_launch_dependents``), so that its prologue runs beside the routing; the combine, launched
as a programmatic dependent (``launch_pdl``), waits for the kernel before it (``gdc_wait``)
before its first load. Tritons older than 3.4 have neither (:data:`HAS_GDC`).
"""

import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_GDC = True
except ImportError:  # Triton < 3.4: the kernels run with PDL=False only
    gdc_launch_dependents = gdc_wait = None
    HAS_GDC = False


@triton.jit
def _bins_of(ids_ptr, offs, mask, E: tl.constexpr, BINS: tl.constexpr):
    ids = tl.load(ids_ptr + offs, mask=mask, other=0)
    # the range check in the ids' own type: an int64 id of 2**32 + 1 must not pass as 1
    bins = tl.where((ids >= 0) & (ids < E), ids, E).to(tl.int32)
    return tl.where(mask, bins, BINS - 1)


@triton.jit
def count_chunk(ids_ptr, hist_ptr, rows, E: tl.constexpr, BINS: tl.constexpr,
                BLOCK: tl.constexpr):  # fmt: skip
    """``hist[chunk, b]``: the rows of this chunk in bin ``b``, ``b`` in ``[0, E]``."""
    chunk = tl.program_id(0)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    counts = tl.histogram(_bins_of(ids_ptr, offs, offs < rows, E, BINS), BINS)
    b = tl.arange(0, BINS)
    tl.store(hist_ptr + chunk * (E + 1) + b, counts, mask=b <= E)


@triton.jit
def place_chunk(ids_ptr, w_ptr, hist_ptr, base_ptr, counts_ptr, offsets_ptr, token_ptr,
                row_of_flat_ptr, weight_ptr, x_ptr, a_ptr, rows, chunks, top_k, hidden,
                x_stride, E: tl.constexpr, BINS: tl.constexpr, BLOCK: tl.constexpr,
                STEP: tl.constexpr, CSTEP: tl.constexpr, SINGLE: tl.constexpr,
                GATHER: tl.constexpr, HBLOCK: tl.constexpr, CB: tl.constexpr,
                PDL: tl.constexpr):  # fmt: skip
    """Sorted row of every routed row of this chunk: the first row of its bin, plus the rows of
    that bin in earlier chunks, plus those earlier in this chunk (a stable counting sort).
    ``SINGLE`` (one chunk): the counts come from this chunk alone and ``hist`` is not read.

    ``GATHER``: program ``(chunk, h)`` also copies columns ``[h * HBLOCK, (h + 1) * HBLOCK)`` of
    each of the chunk's rows of ``x`` to its sorted row of ``a`` (``a = x[token_of_row]``), so
    the gather needs no launch of its own. Every program of a chunk computes the chunk's rows
    (integer work on a few hundred ids); those with ``h = 0`` store the metadata."""
    if PDL:
        gdc_launch_dependents()
    chunk = tl.program_id(0)
    hb = tl.program_id(1)
    start = chunk * BLOCK
    lane = tl.arange(0, BLOCK)
    offs = start + lane
    mask = offs < rows
    bins = _bins_of(ids_ptr, offs, mask, E, BINS)
    b = tl.arange(0, BINS)
    # rows per bin over all chunks (total) and over the chunks before this one (before)
    if SINGLE:
        total = tl.where(b <= E, tl.histogram(bins, BINS), 0)
        before = tl.zeros([BINS], dtype=tl.int32)
    else:
        total = tl.zeros([BINS], dtype=tl.int32)
        before = tl.zeros([BINS], dtype=tl.int32)
        c_off = tl.arange(0, CSTEP)
        for c0 in range(0, chunks, CSTEP):
            c = c0 + c_off
            tile = tl.load(hist_ptr + c[:, None] * (E + 1) + b[None, :],
                           mask=(c[:, None] < chunks) & (b[None, :] <= E), other=0)  # fmt: skip
            total += tl.sum(tile, axis=0)
            before += tl.sum(tl.where(c[:, None] < chunk, tile, 0), axis=0)
    # first sorted row of each bin: the rows of all lower bins
    first = tl.cumsum(total, axis=0) - total
    if (chunk == 0) & (hb == 0):
        tl.store(counts_ptr + b, total, mask=b < E)
        tl.store(offsets_ptr + b, first + total, mask=b < E)
    # this chunk's first row of each bin, through memory so that each row can read its bin's
    # (a scratch row of this program's own)
    scratch = base_ptr + (chunk * tl.num_programs(1) + hb) * BINS
    tl.store(scratch + b, first + before)
    tl.debug_barrier()
    # stable rank within the chunk: the earlier rows of the chunk in the same bin
    rank = tl.zeros([BLOCK], dtype=tl.int32)
    for j0 in tl.static_range(0, BLOCK, STEP):
        j = j0 + tl.arange(0, STEP)
        other = _bins_of(ids_ptr, start + j, (start + j) < rows, E, BINS)
        same = (other[None, :] == bins[:, None]) & (j[None, :] < lane[:, None])
        rank += tl.sum(same.to(tl.int32), axis=1)
    row = tl.load(scratch + bins, mask=mask, other=0) + rank
    token = offs // top_k
    if hb == 0:
        # a masked choice's slot points nowhere: the combine skips it (its row is never computed)
        tl.store(row_of_flat_ptr + offs, tl.where(bins < E, row, -1).to(tl.int64), mask=mask)
        tl.store(token_ptr + row, token.to(tl.int64), mask=mask)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(weight_ptr + row, w, mask=mask)
    if GATHER:
        # a masked choice's row is copied too (sorted after every expert, never computed), so
        # that every row of a is written
        src = x_ptr + token.to(tl.int64)[:, None] * x_stride
        dst = a_ptr + row.to(tl.int64)[:, None] * hidden
        for c0 in tl.static_range(0, HBLOCK, CB):
            col = hb * HBLOCK + c0 + tl.arange(0, CB)
            keep = mask[:, None] & (col[None, :] < hidden)
            tl.store(dst + col[None, :], tl.load(src + col[None, :], mask=keep), mask=keep)


@triton.jit
def combine(y_ptr, slot_ptr, weight_ptr, out_ptr, hidden, TOP_K: tl.constexpr,
            K_POW2: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """``out[token, h] = sum_j weight[r_j] * y[r_j, h]``, ``r_j = slot[token, j]``, in choice
    order in float32; a masked choice (``r_j = -1``) adds 0, its row never read. The token's rows
    and weights are loaded together first, so that the ``TOP_K`` row loads do not each wait on
    their own index load."""
    if PDL:
        gdc_wait()
    token = tl.program_id(0)
    h = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = h < hidden
    j_all = tl.arange(0, K_POW2)
    rows = tl.load(slot_ptr + token * TOP_K + j_all, mask=j_all < TOP_K, other=-1)
    weights = tl.load(weight_ptr + rows, mask=rows >= 0, other=0.0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        row = tl.sum(tl.where(j_all == j, rows, 0), axis=0)  # choice j's row, from registers
        w = tl.sum(tl.where(j_all == j, weights, 0.0), axis=0)
        last = tl.where(row >= 0, hidden, 0)  # a masked choice loads no column
        y = tl.load(y_ptr + row * hidden + h, mask=h < last, other=0.0)
        acc += w * y.to(tl.float32)
    tl.store(out_ptr + token.to(tl.int64) * hidden + h, acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip

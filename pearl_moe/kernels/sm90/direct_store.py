"""Stage 4's epilogue on sm_90a: wgmma accumulator registers -> bf16 -> global memory, 16 bytes a store
(4 for the last two output groups of a fused tile 32 (2 b + 1) columns wide).

Where the accumulator lives
---------------------------
A ``m64nNk16`` wgmma leaves a 64 x N fp32 tile in the registers of one warpgroup. Thread ``t``
(warp ``w = t / 32`` of the warpgroup, lane ``l``) holds, for each 8-column group ``j`` of the tile,
two neighbouring columns ``2 (l % 4)`` and ``+1`` in two rows, ``16 w + l / 4`` and ``+ 8``::

    acc[(c, h, j)]  ->  row 16 w + l / 4 + 8 h,   column 8 j + 2 (l % 4) + c      c, h in {0, 1}

So after the conversion to bf16 a thread owns only 4 contiguous bytes of any row, and the four
threads of a quad (``l / 4`` equal) hold the 16 bytes of one 8-column group between them.

Regrouping for 16-byte stores
-----------------------------
Hopper's widest global store is 128 bits (``STG.E.128``). Per row half ``h`` and per block of four
column groups ``4 g .. 4 g + 3``, each thread of a quad holds one 32-bit word (two bf16) of each
group. A 4 x 4 transpose inside the quad gives thread ``q = l % 4`` all four words of group
``4 g + q``: in round ``i`` (1..3) every thread sends, with ``shfl.bfly`` by ``i``, the word the
partner ``q ^ i`` needs and receives the word of group ``4 g + q`` that the partner holds. Then one
16-byte store per thread writes eight contiguous bf16 of a row. Three shuffles and a few selects
per 16 bytes; no shared memory, no barrier.

With a fused gated activation (``activation``)
---------------------------------------------
The gate+up weight's rows are interleaved in blocks of 8 (:func:`pearl_moe.kernels.gated_layout.
interleave_gate_up`): accumulator column group ``2 m`` holds gate columns ``8 m .. 8 m + 7`` of
the tile's outputs and group ``2 m + 1`` the up columns of the same outputs. So a thread's words
``(h, 2 m)`` and ``(h, 2 m + 1)`` hold gate and up of the *same* two output columns
``8 m + 2 (l % 4) + {0, 1}``: ``act(gate) * up`` is computed in fp32 inside the thread, no data
moves between lanes, and the result is again one 32-bit word per (row half, output group), as
above with half the groups. The same quad transpose then stores 16 bytes per thread, over four
output groups (64 accumulator columns); ``out`` has ``n / 2`` columns and the tile's outputs start
at ``n_tile * tile_n / 2``. A tile ``32 (2 b + 1)`` columns wide (96, 160, 224) has two output
groups past its ``b`` blocks of four: each thread stores its own word of each, 4 bytes a store
(a quad's four words are one 16-byte segment of the row). So ``tile_n`` is a multiple of 32: at
decode a 96-wide tile can fill the SMs' waves better than 64 or 128 (DeepSeek V4 Pro at 1 token,
6 active experts: 384 tiles of 96, 2.9 waves of 132 SMs, against 2.2 with 128).

Rows past the expert's end (``valid``) and columns past ``n`` are skipped per store; the shuffles
run in every lane regardless (a shuffle inside a divergent branch would read lanes that left).
Alignment: ``out`` is 16-byte aligned (the API checks) and ``n`` is a multiple of 8, so every
row starts on a 16-byte boundary and every 8-column group does too.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64

from ..activation import gated_value

__all__ = ["DirectStoreEpilogue"]


@cute.jit
def _pick(words, index):
    """``words[index]`` for a run-time ``index`` in 0..3, as two levels of selects (no local memory)."""
    low = cutlass.select_((index & 1) != 0, words[1], words[0])
    high = cutlass.select_((index & 1) != 0, words[3], words[2])
    return Int32(cutlass.select_((index & 2) != 0, high, low))


@cute.jit
def quad_transpose(words, q):
    """4 x 4 transpose of 32-bit words across the 4 lanes of a quad.

    ``words[p']`` is this lane's word of column group ``p'``; returns ``out`` with ``out[p]`` =
    lane ``p``'s word of group ``q`` (``q`` = this lane's index in the quad).
    """
    received = [_pick(words, q)]  # round 0: our own word of our group
    for i in cutlass.range_constexpr(1, 4):
        # the partner q ^ i wants our word of its group, q ^ i
        received.append(Int32(cute.arch.shuffle_sync_bfly(_pick(words, q ^ i), offset=i)))
    # received[i] came from lane q ^ i; put lane p's word in slot p, i.e. out[p] = received[p ^ q]
    swap1 = [Int32(cutlass.select_((q & 1) != 0, received[s ^ 1], received[s])) for s in range(4)]
    return [Int32(cutlass.select_((q & 2) != 0, swap1[s ^ 2], swap1[s])) for s in range(4)]


@cute.jit
def _store_words(words, base, offset):
    """Store ``words`` (one or four 32-bit words, contiguous and aligned to their size) at byte
    ``offset`` of the global tensor that starts at address ``base``."""
    count = len(words)
    dst = cute.make_tensor(
        cute.make_ptr(Int32, base + offset, cute.AddressSpace.gmem, assumed_align=4 * count),
        cute.make_layout(count),
    )
    src = cute.make_rmem_tensor(cute.make_layout(count), Int32)
    for p in cutlass.range_constexpr(count):
        src[p] = Int32(words[p])
    cute.autovec_copy(src, dst)


class DirectStoreEpilogue:
    """The direct-store epilogue, mixed into the persistent sm_90a kernel (``epilogue='direct_store'``)."""

    @cute.jit
    def store_tile_direct(self, tiled_mma, acc, mC_mn, a_row0, first, valid, n_tile, mma_tidx):
        """Store one tile's accumulator (this warpgroup's rows: 64, or 128 or 192 in a
        split-accumulator tile) straight to ``out``.

        ``mC_mn`` is ``out`` as (rows, n). Accumulator row ``r`` is output row ``a_row0 + r``;
        rows ``first .. first + valid - 1`` belong to the tile (``first`` > 0 when the A box
        was moved up to end inside A). Columns start at ``n_tile * tile_n``.
        """
        # (MMA, MMA_M, MMA_N): the (row, column) inside the tile of every accumulator value
        tCcC = tiled_mma.get_slice(mma_tidx).partition_C(
            cute.make_identity_tensor((self.mma_m, self.tile_n))
        )
        q = (mma_tidx % 32) % 4
        n = cute.size(mC_mn, mode=[1])  # out's columns: n, or n / 2 with the activation
        out_tile_n = self.config.output_columns(self.tile_n)  # tile_n / 2 with the activation
        col_tile = n_tile * out_tile_n
        base = mC_mn.iterator.toint()
        # MMA_M is 1, or 2 or 3 when one split-accumulator warpgroup computes a 128- or 192-row
        # tile (two or three m64 blocks)
        for m in cutlass.range_constexpr(cute.size(acc, mode=[1])):
            # (MMA, MMA_N) of block m in bf16, then the same registers as 32-bit words: word
            # (h, j) holds columns 8 j + 2 (l % 4) + {0, 1} of row half h (one block at a time
            # keeps the bf16 copy at tile_n / 4 registers)
            acc_m = acc[(None, m, None)]
            if cutlass.const_expr(self.activation is not None):
                rW = self._gated_words(acc_m)
            else:
                rC = cute.make_rmem_tensor(acc_m.layout, self.c_dtype)
                rC.store(acc_m.load().to(self.c_dtype))
                rW = cute.recast_tensor(rC, Int32)
            for h in cutlass.range_constexpr(2):
                row = tCcC[((0, h, 0), m, 0)][0]  # this thread's row (inside the tile) in half h
                for g in cutlass.range_constexpr(out_tile_n // 32):
                    words = [rW[h + 2 * (4 * g + p)] for p in range(4)]
                    out = quad_transpose(words, q)
                    col = col_tile + 32 * g + 8 * q
                    if row >= first and row < first + valid and col < n:
                        _store_words(out, base, (Int64(a_row0 + row) * n + col) * 2)
                # output groups past the last block of four (a fused tile 32 x (2 b + 1) wide):
                # each thread stores its own word, a quad's four words one 16-byte row segment
                for r in cutlass.range_constexpr((out_tile_n % 32) // 8):
                    group = 4 * (out_tile_n // 32) + r
                    col = col_tile + 8 * group + 2 * q
                    if row >= first and row < first + valid and col < n:
                        _store_words([rW[h + 2 * group]], base, (Int64(a_row0 + row) * n + col) * 2)

    @cute.jit
    def _gated_words(self, acc_m):
        """The fused activation of one m64 block: ``act(gate) * up`` per output column, in bf16,
        as 32-bit words in the unfused layout with half the column groups (word ``(h, m)`` =
        output columns ``8 m + 2 (l % 4) + {0, 1}`` of row half ``h``).

        Register ``c + 2 h + 4 j`` of the accumulator is column ``8 j + 2 (l % 4) + c`` of row half
        ``h``; gate of output group ``m`` is in group ``j = 2 m``, its up in ``j = 2 m + 1``."""
        out_groups = self.tile_n // 16
        # (c, h, m) of the outputs in fp32, then bf16 (the same conversion as the unfused path)
        rF = cute.make_rmem_tensor(cute.make_layout(4 * out_groups), self.acc_dtype)
        for mo in cutlass.range_constexpr(out_groups):
            for ch in cutlass.range_constexpr(4):  # c + 2 h
                gate = acc_m[ch + 4 * (2 * mo)]
                up = acc_m[ch + 4 * (2 * mo + 1)]
                rF[ch + 4 * mo] = gated_value(gate, up, self.activation)
        rO = cute.make_rmem_tensor(rF.layout, self.c_dtype)
        rO.store(rF.load().to(self.c_dtype))
        return cute.recast_tensor(rO, Int32)

    @cute.jit
    def _store_swapped(self, tiled_mma, acc, mC_mn, a_row0, first, valid, n_tile, mma_tidx):
        """Store a swapped accumulator (``swap_ab``: weight rows x tokens) to ``out``.

        Accumulator element (c, t) is ``out[a_row0 + t, n_tile * tile_n + c]``. A thread holds,
        for each of its values, one output column of one token, next to the same column of the
        next token (``out`` rows ``n`` elements apart): the values are stored one bf16 at a time.
        At decode, where swapped tiles are used, the output is about 0.1% of the bytes a tile
        moves (V4 Pro at 64 tokens: 4.7 MB of output against 4.2 GB of weights).
        """
        # (MMA, MMA_M, MMA_N): the (weight row, token) inside the tile of every accumulator value
        tCcC = tiled_mma.get_slice(mma_tidx).partition_C(
            cute.make_identity_tensor((self.tile_n, self.tile_m))
        )
        rC = cute.make_rmem_tensor(acc.layout, self.c_dtype)
        rC.store(acc.load().to(self.c_dtype))
        n = cute.size(mC_mn, mode=[1])
        col_tile = n_tile * self.tile_n
        base = mC_mn.iterator.toint()
        for i in cutlass.range_constexpr(cute.size(rC)):
            c, t = tCcC[i]
            col = col_tile + c
            if t >= first and t < first + valid and col < n:
                offset = (Int64(a_row0 + t) * n + col) * 2  # bytes
                dst = cute.make_tensor(
                    cute.make_ptr(self.c_dtype, base + offset, cute.AddressSpace.gmem),
                    cute.make_layout(1),
                )
                dst[0] = rC[i]

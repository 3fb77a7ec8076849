"""Stage 4's option (``epilogue="direct_store"``): TMEM -> registers -> bf16 -> global memory.

The stage-3 epilogue stages every ``tile_m x epi_tile_n`` slice of the accumulator in a shared
memory buffer (24 KB at 128 x 128) and lets one thread TMA-store it. This one stores straight from
registers::

    TMEM --tcgen05.ld--> fp32 registers --cvt--> bf16 registers --STG.E.ENL2.256--> global

* **One thread, one row.** ``tcgen05.ld.32x32b`` (128-row CTA tiles) and ``.16x32bx2`` (64-row
  tiles, stage 5) give each thread ``epi_tile_n`` (or half as many) consecutive columns of a single
  accumulator row, i.e. 64 contiguous bytes of one output row per subtile: two 256-bit stores.
* **256-bit stores need 32-byte alignment.** ``STG.E.ENL2.256`` (sm_100+) writes 32 bytes at a
  32-byte aligned address. The output pointer is re-declared with ``assumed_align=32``; with
  ``n % 16 == 0`` every row starts 32-byte aligned, and column offsets are multiples of 16
  elements. ``can_implement`` asks for both (``launch`` checks the pointer). ``store_bits=128``
  keeps 16-byte stores (``STG.E.128``): twice the instructions for the same bytes, the variant the
  post started from.
* **Rows guarded at the expert's end.** A tile's rows past the expert's last row belong to the
  next expert: a predicate per store vector (the vector's first (row, column), from an identity
  tensor partitioned exactly like the accumulator) skips them, and the columns past ``n``.
  A thread owns one row, so the row test is one compare per subtile.
* **Drained in column pieces.** ``epi_tile_n`` columns per step (32 fp32 registers per thread);
  a whole-tile drain (256 registers at 128 x 256) would spill.
* **The accumulator is released as soon as its last column is in registers** (after
  ``tcgen05.wait::ld``), before the conversion and the stores; with ``acc_slots=2`` (stage 7)
  each slot is released on its own.
* **No shared memory, no TMA descriptor per expert.** The epilogue buffer's bytes go to the ring
  (6 -> 7 entries at 128 x 128 x 64), the descriptor pre-kernel is not launched, and the epilogue
  warps need no named barrier per slice (only one before TMEM is freed).

* **A fused gated activation** (``activation``, beyond the post): the gate+up weight's rows are
  interleaved in blocks of 8 (:mod:`pearl_moe.kernels.gated_layout`), so each 16 columns of a
  thread's run are 8 gate and the 8 matching up values; the thread computes ``act(gate) * up``
  in fp32 and stores half as many bf16 outputs (``_store_gated``), to ``n / 2`` output columns.

Compile-verified only: no B200 has ever run this code.
"""

import cutlass
import cutlass.cute as cute
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import CacheEvictionPriority, CopyR2GOp, tcgen05
from cutlass.utils.gemm.sm100 import transform_partitioned_tensor_layout

from ..activation import gated_value
from .common import fused_store_elems
from .row_tiles_64 import sixteen_lane_load

__all__ = ["DirectStoreEpilogue"]


class DirectStoreEpilogue:
    """Mixed into :class:`~.stage3_persistent.PersistentGroupedGemmKernel`; used when
    ``config.epilogue == "direct_store"``."""

    def tmem_load_atom(self, epi_tile):
        """The ``tcgen05.ld`` form that gives each thread a run of one accumulator row."""
        if self.config.cta_tile_m == 64 and not self.use_2cta:
            return sixteen_lane_load(self.config.epi_tile_n, self.acc_dtype)  # stage 5
        # 32 lanes per warp, one row per thread (the 2-CTA 64-row case tiles the warps 2 x 2)
        return sm100_utils.get_tmem_load_op(
            self.cta_tile_mnk, self.c_layout, self.c_dtype, self.acc_dtype, epi_tile, self.use_2cta
        )

    def output_tile(self, mC, row0, n_tile):
        """``(tile_m, tile_n)`` view of the output at row ``row0``, columns of tile ``n_tile``.

        The base address is formed in 64 bits (``row0 * n`` passes ``2**31`` at 524,288 rows of
        4096) and re-declared 32-byte aligned, so that the stores can be 256 bits wide.
        """
        n = cute.size(mC, mode=[1])
        offset = cutlass.Int64(row0) * n + n_tile * self.out_tile_n
        align = self.config.direct_store_bits // 8
        if cutlass.const_expr(self.activation is not None):
            align = fused_store_elems(self.config) * 2  # what can_implement guarantees for n / 2
        base = cute.make_ptr(
            self.c_dtype, (mC.iterator + offset).toint(), cute.AddressSpace.gmem,
            assumed_align=align,
        )  # fmt: skip
        # (bM, bN): row-major with the output's row pitch
        return cute.make_tensor(base, cute.make_layout(self.mma_tiler_mnk[:2], stride=(n, 1)))

    @cute.jit
    def store_tile_direct(
        self,
        tidx,
        thr_mma,
        tCtAcc: cute.Tensor,
        gC: cute.Tensor,
        row_limit,
        col_limit,
        acc_pipeline,
        acc_state,
    ):
        """Wait for the accumulator, store it to ``gC`` in ``epi_tile_n``-column pieces, release it.

        ``gC`` (bM, bN) is the tile in global memory (:meth:`output_tile`); rows ``>= row_limit``
        and columns ``>= col_limit`` (tile coordinates) are not written. ``acc_state`` is waited
        on and released once per accumulator slot (``acc_slots``) and returned advanced.
        """
        slots = self.config.acc_slots
        # (MMA, MMA_M, MMA_N): this CTA's part of the tile, and its (row, col) tile coordinates
        tCgC = thr_mma.partition_C(gC)
        tCcC = thr_mma.partition_C(cute.make_identity_tensor(self.mma_tiler_mnk[:2]))
        # ((ATOM_M, MMA_M), (ATOM_N, MMA_N)) for TMEM, global memory and coordinates
        tAcc = transform_partitioned_tensor_layout(tCtAcc)
        tGC = transform_partitioned_tensor_layout(tCgC)
        tCC = transform_partitioned_tensor_layout(tCcC)
        epi_tile = self._epilogue_tile()
        # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N)
        tAcc_epi = cute.flat_divide(tAcc, epi_tile)
        tiled_t2r = tcgen05.make_tmem_copy(
            self.tmem_load_atom(epi_tile), tAcc_epi[(None, None, 0, 0)]
        )
        thr_t2r = tiled_t2r.get_slice(tidx)
        # (T2R, T2R_M, T2R_N, SUBTILE): what this thread drains per subtile, from TMEM ...
        tTR_tAcc = thr_t2r.partition_S(tAcc_epi)
        tTR_tAcc = cute.group_modes(tTR_tAcc, 3, cute.rank(tTR_tAcc))
        # ... and where it goes: (T2R, T2R_M, T2R_N, SUBTILE) in global memory and coordinates
        tTR_gC = thr_t2r.partition_D(cute.flat_divide(tGC, epi_tile))
        tTR_gC = cute.group_modes(tTR_gC, 3, cute.rank(tTR_gC))
        tTR_cC = thr_t2r.partition_D(cute.flat_divide(tCC, epi_tile))
        tTR_cC = cute.group_modes(tTR_cC, 3, cute.rank(tTR_cC))
        # (T2R, T2R_M, T2R_N): one subtile in registers, fp32 and bf16
        tTR_rAcc = cute.make_rmem_tensor(tTR_gC[(None, None, None, 0)].shape, self.acc_dtype)
        tTR_rC = cute.make_rmem_tensor(tTR_rAcc.shape, self.c_dtype)

        store_bits = self.config.direct_store_bits
        vec = store_bits // self.c_dtype.width  # elements per store (16 bf16 = 256 bits)
        store_atom = cute.make_copy_atom(
            CopyR2GOp(),
            self.c_dtype,
            num_bits_per_copy=store_bits,
            l1c_evict_priority=CacheEvictionPriority.NO_ALLOCATE,
        )
        # ((VEC, REST), T2R_M, T2R_N): the registers as store vectors
        rC_vec = cute.logical_divide(tTR_rC, (vec,))
        # (REST, T2R_M, T2R_N): one predicate per store vector
        pred = cute.make_rmem_tensor(
            (cute.size(rC_vec, mode=[0, 1]), *rC_vec.shape[1:]), cutlass.Boolean
        )

        subtiles = cute.size(tTR_tAcc, mode=[3])
        per_slot = subtiles // slots
        for slot in cutlass.range_constexpr(slots):
            acc_pipeline.consumer_wait(acc_state)
            for j in cutlass.range_constexpr(per_slot):
                subtile = slot * per_slot + j
                cute.copy(tiled_t2r, tTR_tAcc[(None, None, None, subtile)], tTR_rAcc)
                if cutlass.const_expr(j == per_slot - 1):
                    # the slot's last TMEM read: wait for it, then hand the columns back
                    cute.arch.fence_view_async_tmem_load()
                    with cute.arch.elect_one():
                        acc_pipeline.consumer_release(acc_state)
                    acc_state.advance()
                if cutlass.const_expr(self.activation is not None):
                    self._store_gated(
                        tTR_rAcc, tTR_cC[(None, None, None, subtile)], gC, row_limit, col_limit
                    )
                else:
                    tTR_rC.store(tTR_rAcc.load().to(self.c_dtype))
                    # ((VEC, REST), T2R_M, T2R_N) coordinates and destination of this subtile
                    cC_vec = cute.logical_divide(tTR_cC[(None, None, None, subtile)], (vec,))
                    gC_vec = cute.logical_divide(tTR_gC[(None, None, None, subtile)], (vec,))
                    for v in cutlass.range_constexpr(cute.size(pred, mode=[0])):
                        for i in cutlass.range_constexpr(cute.size(pred, mode=[1])):
                            for k in cutlass.range_constexpr(cute.size(pred, mode=[2])):
                                pred[v, i, k] = cute.elem_less(
                                    cC_vec[(0, v), i, k], (row_limit, col_limit)
                                )
                    cute.copy(store_atom, rC_vec, gC_vec, pred=pred)
        return acc_state

    @cute.jit
    def _store_gated(self, tTR_rAcc, tTR_cC, gC, row_limit, col_limit):
        """The fused activation of one subtile: a thread's run of ``R`` accumulator columns of one
        row (``R`` a multiple of 16, starting on a multiple of 16) holds, per 16 columns, 8 gate
        and then the 8 matching up columns (:func:`pearl_moe.kernels.interleave_gate_up`); it
        becomes ``R / 2`` consecutive outputs, stored from the output column ``c0 / 2``.

        ``gC`` is the tile's output at its first output column, row pitch ``n / 2`` (a
        ``(bM, bN)`` view: only its base and pitch are used here); ``col_limit`` counts output
        columns. A run is stored whole or not at all: ``can_implement`` asks ``n / 2`` to be a
        multiple of the run's outputs, so a run that starts inside the row ends inside it.

        Assumed, as the unfused 256-bit store's partition implies: register ``i`` of the run is
        column ``c0 + i`` (32x32b loads; 16x32bx2 for 64-row tiles; the 2 x 2 fold at a multiple
        of 16)."""
        run = cute.size(tTR_rAcc)
        row, col = tTR_cC[0]  # tile coordinates of this thread's first register
        rF = cute.make_rmem_tensor(cute.make_layout(run // 2), self.acc_dtype)
        for b in cutlass.range_constexpr(run // 16):
            for r in cutlass.range_constexpr(8):
                rF[8 * b + r] = gated_value(
                    tTR_rAcc[16 * b + r],
                    tTR_rAcc[16 * b + 8 + r],
                    self.activation,
                    False,  # IEEE division: the reciprocal spills the 2-CTA 128 x 256 tile
                )
        rO = cute.make_rmem_tensor(rF.layout, self.c_dtype)
        rO.store(rF.load().to(self.c_dtype))
        elems = fused_store_elems(self.config)
        if row < row_limit and col // 2 < col_limit:
            pitch = gC.layout.stride[0]
            offset = cutlass.Int64(row) * pitch + col // 2
            dst = cute.make_tensor(
                cute.make_ptr(
                    self.c_dtype,
                    (gC.iterator + offset).toint(),
                    cute.AddressSpace.gmem,
                    assumed_align=elems * 2,
                ),
                cute.make_layout(run // 2),
            )
            store_atom = cute.make_copy_atom(
                CopyR2GOp(),
                self.c_dtype,
                num_bits_per_copy=elems * 16,
                l1c_evict_priority=CacheEvictionPriority.NO_ALLOCATE,
            )
            cute.copy(
                store_atom, cute.logical_divide(rO, (elems,)), cute.logical_divide(dst, (elems,))
            )

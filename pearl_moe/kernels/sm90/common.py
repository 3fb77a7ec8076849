"""Pieces every sm_90a stage shares: tile shapes, shared-memory layout, TMA atoms, the epilogue.

Each stage kernel subclasses :class:`KernelBase`. The base class turns a
:class:`~pearl_moe.config.GemmConfig` into the objects a Hopper GEMM needs:

* a tiled wgmma (one 64-row warpgroup MMA per 64 rows of the tile, bf16 x bf16 -> fp32; a tile
  of 8-32 rows still runs one 64-row wgmma and drops the extra rows);
* swizzled shared-memory layouts of the A ring, the B ring and the epilogue buffer;
* TMA atoms for A (rows, k), W viewed as (n, k, experts) and the output.

Shared memory is carved in a fixed order so that it equals :func:`pearl_moe.config.smem_budget`::

    offset 0            A ring     ring_depth x tile_m x tile_k x 2 B        (1024-byte aligned)
                                   (+ (64 - tile_m) x tile_k x 2 B below 64 rows: the rest of
                                   the 64-row wgmma operand that the last entry reads)
    + A                 B ring     b_ring_depth x tile_n x tile_k x b_k_tiles x 2 B
    + A + B             epilogue   epi_buffers x tile_m x epi_tile_n x 2 B   (0 for direct stores)
    + A + B + C         barriers   2 x ring_depth x 8 B (full + empty mbarrier per ring entry)
                                   + 2 x b_ring_depth x 8 B when B has its own ring (b_k_tiles > 1)
    + ...               bookkeeping 64 B
                                   -----------------------------------------------
                                   total = smem_budget(config).total

Every ring entry is a multiple of 1024 bytes (tile_k = 64 bf16 is one 128-byte swizzle row; tile_m
and tile_n are multiples of 8), so no alignment padding appears between the buffers.

The output view that keeps a TMA store inside its expert
--------------------------------------------------------
A grouped GEMM writes expert ``e``'s rows ``[start_e, end_e)`` of ``out``. A TMA store of a full
``tile_m``-row box starting at ``tile_start`` would spill into the next expert whenever fewer than
``tile_m`` rows remain. The TMA unit clips boxes against the *extents* of its descriptor, so we give
the store a three-dimensional view of ``out`` in which the clipping happens at the expert's end::

    out3[i, j, e] = out[e - tile_m + i, j]      i in [0, tile_m), j in [0, n), e in [0, rows]

``out3[:, :, e]`` is the block of ``tile_m`` rows that *ends* just before row ``e``. A tile with
``valid = min(tile_m, end_e - tile_start)`` rows is stored with box origin
``(i, j, e) = (tile_m - valid, n0, tile_start + valid)``: box row ``r`` lands on
``out[tile_start + r]`` and rows ``r >= valid`` have ``i >= tile_m``, outside the descriptor, so
the TMA unit drops them. The view's base address is ``tile_m`` rows before ``out``; the TMA unit
only ever touches in-bounds elements, all of which lie inside ``out``. No per-expert descriptor,
no predication, no extra instructions.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from ...config import GemmConfig, smem_budget
from ..rules import shared_problems

__all__ = ["KernelBase", "can_implement", "epilogue_slice_copies", "WARPGROUP_THREADS"]

WARPGROUP_THREADS = 128
#: Widest tile a 256-row cooperative tile may have: its two consumer warpgroups hold 128 rows each,
#: ``tile_n`` fp32 registers a thread, and a consumer thread gets 232 (``setmaxnreg``).
MAX_256_ROW_TILE_N = 192
#: 32-bit words reserved after the barriers: the budget model's BOOKKEEPING_BYTES, which both
#: architectures share (sm_100a keeps its TMEM address and 2-CTA barrier there; sm_90a uses none).
_BOOKKEEPING_WORDS = 16


def epilogue_slice_copies(s: int, v_n: int, m_n: int, j_n: int, per_m: int) -> list:
    """``(tRS_rC index, tRS_rAcc index)`` pairs that fill epilogue slice ``s`` (plain Python,
    unrolled at trace time by :meth:`KernelBase.epilogue_tile`, checked on the CPU by
    ``tests/test_epilogue_mapping.py``).

    ``v_n, m_n, j_n``: the sizes of the slice buffer ``tRS_rC``'s three modes (values, m blocks,
    column groups); ``per_m``: the size of the retiled accumulator ``tRS_rAcc``'s mode 0 (one m
    block's values across the whole tile). With one m64 block per thread (64- and 128-row tiles)
    a slice is a contiguous run of ``tRS_rAcc``. With two (a 256-row tile: two warpgroups of 128
    rows) ``tRS_rAcc`` holds each block's values column group by column group across the whole
    tile, the blocks one after the other, while the slice buffer wants both blocks inside each
    column group: a flat copy would put rows 128-255's values among rows 0-127's."""
    if m_n == 1:
        size = v_n * j_n
        return [(v, s * size + v) for v in range(size)]
    return [
        (v + v_n * (m + m_n * j), v + v_n * (s * j_n + j) + per_m * m)
        for m in range(m_n)
        for j in range(j_n)
        for v in range(v_n)
    ]


def can_implement(
    config: GemmConfig, stage: int, n: int | None = None, k: int | None = None
) -> list[str]:
    """Reasons sm_90a stage ``stage`` cannot run ``config`` at ``(n, k)`` (empty list: it can; ``n``
    and ``k`` None: at any shape). The rules every architecture shares
    (:func:`pearl_moe.kernels.rules.shared_problems`), then those of these kernels."""
    problems = shared_problems("sm_90a", config, stage, n, k)
    if config.arch != "sm_90a":
        return problems  # the rules below read sm_90a fields
    if config.tile_m == 256:
        if config.acc_slots != 1 or config.b_k_tiles != 1:
            problems.append(
                "a 256-row tile is cooperative (two warpgroups of 128 rows): not with the split "
                "accumulator or wide B entries"
            )
        if config.tile_n > MAX_256_ROW_TILE_N:
            problems.append(
                f"a 256-row tile keeps tile_n fp32 accumulator registers per thread (two "
                f"warpgroups of 128 rows); at most {MAX_256_ROW_TILE_N} leave room under the "
                f"232 a consumer thread gets, got tile_n={config.tile_n}"
            )
    if config.tile_k % 64:
        problems.append(
            f"tile_k must be a multiple of 64 (one 128-byte swizzle row), got {config.tile_k}"
        )
    if config.tile_n % 16:
        problems.append(f"tile_n must be a multiple of 16, got {config.tile_n}")
    if config.b_k_tiles not in (1, 2):
        problems.append(
            f"sm90 B ring entries span 1 or 2 K tiles, got b_k_tiles={config.b_k_tiles}"
        )
    if config.epilogue == "direct_store" and not config.swap_ab and config.tile_n % 32:
        problems.append(
            "the direct store writes 32-column groups (a quad transpose per 4 x 8 columns; fused: "
            "blocks of 32 outputs, then up to two 8-column groups 4 bytes a thread): tile_n must "
            f"be a multiple of 32, got {config.tile_n}"
        )
    if config.epi_tile_n <= 0 or config.tile_n % config.epi_tile_n or config.epi_tile_n % 8:
        problems.append(f"epi_tile_n={config.epi_tile_n} must be a multiple of 8 dividing tile_n")
    return problems


class KernelBase:
    """Configuration shared by the sm_90a stages (pure Python; no device code here)."""

    #: The last course stage whose options this kernel class implements (stage 3's persistent
    #: kernel carries the options of stages 4-7).
    max_stage = 1

    def __init__(self, config: GemmConfig):
        config = config.resolved()
        problems = can_implement(config, self.max_stage)  # the rules of any shape
        if problems:
            raise ValueError("; ".join(problems))
        self.config = config
        self.ab_dtype = cutlass.BFloat16
        self.c_dtype = cutlass.BFloat16
        self.acc_dtype = cutlass.Float32
        self.tile_m, self.tile_n, self.tile_k = config.tile_m, config.tile_n, config.tile_k
        self.tile_shape_mnk = (self.tile_m, self.tile_n, self.tile_k)
        self.ring_depth = config.ring_depth
        self.epi_buffers = config.epi_buffers
        self.epi_tile = (self.tile_m, config.epi_tile_n)
        # Options of stages 4, 6 and 7 (all off in stages 1-3's configurations).
        self.direct_store = config.epilogue == "direct_store"
        self.b_k_tiles = config.b_k_tiles
        self.wide_b = config.b_k_tiles > 1
        self.b_ring_depth = config.b_ring_depth
        self.split_accumulator = config.acc_slots == 2  # two consumer warpgroups take turns
        # One wgmma warpgroup per 64 accumulator rows (wgmma's M is 64) computes a tile, at most
        # two: a 256-row tile gives each of the two 128 rows (two m64 blocks per k block; four
        # consumer warpgroups would need 4 x 128 x 232 registers, more than the SM's 64 K). With
        # the split accumulator two warpgroups each own a whole tile and take alternate tiles (a
        # 128-row tile is then two m64 wgmma per k block in one warpgroup). A tile of fewer rows
        # still runs a 64-row wgmma (its extra accumulator rows are dropped).
        self.mma_m = max(self.tile_m, 64)
        self.num_mma_warpgroups = 1 if self.split_accumulator else min(self.mma_m // 64, 2)
        # Swapped operands: the tile's tile_n weight rows are the wgmma's M (tile_n / 64 m64
        # blocks, one warpgroup) and its tile_m tokens the wgmma's N.
        self.swap_ab = config.swap_ab
        if self.swap_ab:
            self.mma_m = self.tile_n
            self.num_mma_warpgroups = 1
        self.shift_a_box = config.shift_a_box
        # clusters of two CTAs along N share (multicast) one A tile, along M one B tile
        self.cluster_n = config.cluster_n
        self.cluster_m = config.cluster_m
        self.cluster_size = self.cluster_n * self.cluster_m  # 1: no clusters
        self.activation = config.activation  # fused act(gate) * up in the direct store, or None
        self.mma_threads_per_tile = self.num_mma_warpgroups * WARPGROUP_THREADS
        self.num_consumer_warpgroups = 2 if self.split_accumulator else self.num_mma_warpgroups
        self.num_mma_threads = self.num_consumer_warpgroups * WARPGROUP_THREADS
        self.smem_bytes = smem_budget(config).total

    # ------------------------------------------------------------------ host-side setup
    def _setup(self):
        """Tiled MMA and shared-memory layouts (called inside the host @cute.jit)."""
        row = LayoutEnum.ROW_MAJOR  # A (m, k), W (n, k) and out (m, n) are all K/N-major
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            row.sm90_mma_major_mode(),
            row.sm90_mma_major_mode(),
            self.acc_dtype,
            (self.num_mma_warpgroups, 1, 1),
            tiler_mn=(64, self.tile_m if self.swap_ab else self.tile_n),
        )
        # (tile_m, tile_k, ring_depth), (tile_n, tile_k * b_k_tiles, b_ring_depth),
        # (tile_m, epi_n, epi_buffers)
        self.a_smem_layout = sm90_utils.make_smem_layout_a(
            row, self.tile_shape_mnk, self.ab_dtype, self.ring_depth
        )
        # (mma_m, tile_k, ring_depth): what the wgmma reads. Below 64 rows an A entry is tile_m
        # rows apart from the next, but the wgmma reads 64 rows from its start: rows past tile_m
        # are the following entries (or the B ring after the last one), computed and dropped.
        self.a_mma_layout = self.a_smem_layout
        if self.tile_m < 64:
            one = sm90_utils.make_smem_layout_a(
                row, (64, self.tile_n, self.tile_k), self.ab_dtype, 1
            )
            outer = cute.append(
                cute.slice_(one.outer, (None, None, 0)),
                cute.make_layout(self.ring_depth, stride=self.tile_m * self.tile_k),
            )
            self.a_mma_layout = cute.make_composed_layout(one.inner, 0, outer)
        # with b_k_tiles=2 one B entry holds two K tiles (two 128-byte swizzle atoms along K)
        self.b_smem_layout = sm90_utils.make_smem_layout_b(
            row,
            (self.tile_m, self.tile_n, self.tile_k * self.b_k_tiles),
            self.ab_dtype,
            self.b_ring_depth,
        )
        self.epi_smem_layout = sm90_utils.make_smem_layout_epi(
            self.c_dtype, row, self.epi_tile, self.epi_buffers
        )

    def _tma_load_atom(self, tensor, smem_layout_staged, tile, multicast: int = 1):
        """TMA load of one ring entry's ``tile``; with ``multicast`` CTAs, each loads
        ``1 / multicast`` of the box and the TMA writes it into every CTA of the cluster."""
        one = cute.slice_(smem_layout_staged, (None, None, 0))
        if multicast == 1:
            op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        else:
            op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
        return cute.nvgpu.cpasync.make_tiled_tma_atom(op, tensor, one, tile, multicast)

    def _tma_store_atom(self, tensor):
        one = cute.slice_(self.epi_smem_layout, (None, None, 0))
        return cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), tensor, one, self.epi_tile
        )

    # ------------------------------------------------------------------ device-side helpers
    def allocate_smem(self, a_layout, b_layout, epi_layout, a_mma_layout=None):
        """Carve shared memory in the budget model's order; returns (sA, sB, sC, barriers).

        ``sC`` is None with direct stores (no epilogue buffer); with wide B entries the barrier
        block also holds the B ring's full/empty pairs (``2 x b_ring_depth`` more mbarriers).
        """
        smem = SmemAllocator()
        # (mma_m, tile_k, ring_depth): the wgmma's view (``a_mma_layout``, the same as the TMA's
        # ``a_layout`` at 64 rows and more); the TMA writes tile_m rows of each entry
        a_mma_layout = a_layout if a_mma_layout is None else a_mma_layout
        sA = smem.allocate_tensor(self.ab_dtype, a_mma_layout.outer, 1024, a_mma_layout.inner)
        # (tile_n, tile_k * b_k_tiles, b_ring_depth)
        sB = smem.allocate_tensor(self.ab_dtype, b_layout.outer, 1024, b_layout.inner)
        sC = None
        if cutlass.const_expr(not self.direct_store):
            # (tile_m, epi_n, epi_buffers)
            sC = smem.allocate_tensor(self.c_dtype, epi_layout.outer, 1024, epi_layout.inner)
        count = 2 * self.ring_depth + (2 * self.b_ring_depth if self.wide_b else 0)
        barriers = smem.allocate_array(cutlass.Int64, count, byte_alignment=8)
        # the reserved bookkeeping words, so that the total is the budget model's
        smem.allocate_array(cutlass.Int32, _BOOKKEEPING_WORDS, byte_alignment=8)
        return sA, sB, sC, barriers

    def _a_box_view(self, sA, a_layout):
        """(tile_m, tile_k, ring_depth): the part of each A entry the TMA writes."""
        if cutlass.const_expr(self.tile_m >= 64):
            return sA
        return cute.make_tensor(sA.iterator, a_layout.outer)

    def make_ab_pipeline(self, barriers, consumer_warps: int, a_layout, b_layout):
        """Full/empty mbarrier ring: TMA arrives with a byte count, consumer warps release.

        One ring entry holds a K tile of A and of B. With wide B entries (``b_k_tiles=2``) this
        ring holds A only and :meth:`_make_b_pipeline` gives B a ring of its own.
        """
        tma_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(a_layout, (None, None, 0)))
        if cutlass.const_expr(not self.wide_b):
            tma_bytes += cute.size_in_bytes(self.ab_dtype, cute.slice_(b_layout, (None, None, 0)))
        return self._tma_pipeline(barriers, self.ring_depth, consumer_warps, tma_bytes)

    def _make_b_pipeline(self, barriers, consumer_warps: int, b_layout):
        """The ring of wide B entries; its mbarriers follow the A ring's in the barrier block."""
        b_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(b_layout, (None, None, 0)))
        return self._tma_pipeline(
            barriers + 2 * self.ring_depth, self.b_ring_depth, consumer_warps, b_bytes
        )

    def _tma_pipeline(self, barriers, entries: int, consumer_warps: int, tx_bytes: int):
        """With clusters a ring entry of the shared operand (A with ``cluster_n=2``, B with
        ``cluster_m=2``) is written by both CTAs of the cluster (multicast), so it is free again
        only when the consumers of both released it: each consumer warp arrives on the empty
        barrier of both CTAs (``mcast_mode_mn``: (1, 0) makes the CTAs of the same rows
        partners, (0, 1) those of the same columns), and an entry's empty barrier counts
        ``2 x consumer_warps`` arrivals. The full barrier's byte count is unchanged: the whole
        shared tile (half from each CTA) and this CTA's own tile of the other operand."""
        return pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers,
            num_stages=entries,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, consumer_warps * self.cluster_size
            ),
            tx_count=tx_bytes,
            cta_layout_vmnk=self.cluster_layout_vmnk(),
            mcast_mode_mn=(0, 1) if self.cluster_m > 1 else (1, 0),
        )

    def cluster_layout_vmnk(self):
        """(V, M, N, K) = (1, cluster_m, cluster_n, 1): where the CTAs of a cluster sit."""
        return cute.make_layout((1, self.cluster_m, self.cluster_n, 1))

    @cute.jit
    def _issue_loads(
        self, ab_pipeline, state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB,
        a_mcast_mask=None, b_mcast_mask=None,
    ):  # fmt: skip
        """One ring entry: wait until it is empty, then TMA A and B k tile ``state.count`` into it
        (with a multicast mask, this CTA's part of that operand into every CTA of the mask)."""
        ab_pipeline.producer_acquire(state)
        bar = ab_pipeline.producer_get_barrier(state)
        self._tma_copy(tma_atom_a, tAgA[(None, state.count)], tAsA[(None, state.index)], bar,
                       a_mcast_mask)  # fmt: skip
        self._tma_copy(tma_atom_b, tBgB[(None, state.count)], tBsB[(None, state.index)], bar,
                       b_mcast_mask)  # fmt: skip
        ab_pipeline.producer_commit(state)

    @cute.jit
    def _tma_copy(self, atom, src, dst, bar, mcast_mask=None):
        if cutlass.const_expr(mcast_mask is None):
            cute.copy(atom, src, dst, tma_bar_ptr=bar)
        else:
            cute.copy(atom, src, dst, tma_bar_ptr=bar, mcast_mask=mcast_mask)

    @cute.jit
    def mma_k_tile(self, tiled_mma, acc, tCrA, tCrB, a_index, b_index=None, b_kblock0=0):
        """All wgmma instructions of one k tile (tile_k / 16 of them), committed as one group.

        ``tCrA`` / ``tCrB`` are the fragments of the A ring (tokens) and of the B ring (weights);
        with ``swap_ab`` the wgmma takes them the other way round. ``a_index`` / ``b_index`` pick
        the ring entries (the same entry unless B has a ring of its own); ``b_kblock0`` is this K
        tile's first k block inside a wide B entry.
        """
        if cutlass.const_expr(b_index is None):
            b_index = a_index
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            a_kblock = tCrA[(None, None, kb, a_index)]
            b_kblock = tCrB[(None, None, b_kblock0 + kb, b_index)]
            if cutlass.const_expr(self.swap_ab):  # weights are the MMA's A, tokens its B
                cute.gemm(tiled_mma, acc, b_kblock, a_kblock, acc)
            else:
                cute.gemm(tiled_mma, acc, a_kblock, b_kblock, acc)
        cute.nvgpu.warpgroup.commit_group()

    @cute.jit
    def epilogue_tile(
        self,
        tiled_mma,
        acc,
        sC,
        tma_atom_c,
        gC,
        mma_tidx,
        store_pipeline,
        epi_barrier,
        is_store_warp,
        buffer_base,
    ):
        """Registers -> swizzled SMEM (stmatrix) -> TMA store, one (tile_m x epi_n) slice at a time.

        ``gC`` is the (tile_m, tile_n) coordinate tile of the store's TMA tensor; whatever part of
        it lies outside the descriptor (past the expert's rows, past n) is dropped by the TMA unit.
        ``buffer_base`` counts slices stored earlier, so a persistent CTA keeps cycling its buffers.
        """
        row = LayoutEnum.ROW_MAJOR
        copy_atom_r2s = sm90_utils.sm90_get_smem_store_op(row, self.c_dtype, self.acc_dtype)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype)
        tiled_copy_r2s = cute.make_tiled_copy_S(
            copy_atom_r2s, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma)
        )
        thr_copy_r2s = tiled_copy_r2s.get_slice(mma_tidx)
        # (R2S, R2S_M, R2S_N, epi_buffers)
        tRS_sC = thr_copy_r2s.partition_D(sC)
        # (R2S, R2S_M, R2S_N * epi tiles): the accumulator seen through the stmatrix copy
        tRS_rAcc = tiled_copy_r2s.retile(acc)
        rC_shape = cute.shape(thr_copy_r2s.partition_S(sC))
        # (R2S, R2S_M, R2S_N): one epilogue slice in fp32, then bf16
        tRS_rC = cute.make_rmem_tensor(rC_shape[:3], self.acc_dtype)
        tRS_rC_out = cute.make_rmem_tensor(rC_shape[:3], self.c_dtype)
        # ((tile_m, epi_n), (1, tile_n / epi_n)): the tile cut into epilogue slices
        gC_epi = cute.zipped_divide(gC, self.epi_tile)
        # (TMA, epi_buffers), (TMA, (1, slices))
        bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(
            tma_atom_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_epi
        )
        slices = cute.size(gC_epi, mode=[1])
        slice_size = cute.size(tRS_rC)
        # (value, m block, column group) sizes of a slice, and one m block's values in tRS_rAcc
        v_n, m_n, j_n = (cute.size(tRS_rC, mode=[i]) for i in range(3))
        per_m = cute.size(tRS_rAcc, mode=[0])
        assert slice_size == v_n * m_n * j_n
        for s in cutlass.range_constexpr(slices):
            for dst, src in epilogue_slice_copies(s, v_n, m_n, j_n, per_m):
                tRS_rC[dst] = tRS_rAcc[src]
            tRS_rC_out.store(tRS_rC.load().to(self.c_dtype))
            buf = (buffer_base + s) % self.epi_buffers
            cute.copy(tiled_copy_r2s, tRS_rC_out, tRS_sC[(None, None, None, buf)])
            # stmatrix writes are generic-proxy; the TMA unit reads through the async proxy.
            cute.arch.fence_proxy("async.shared", space="cta")
            epi_barrier.arrive_and_wait()
            if is_store_warp:
                cute.copy(tma_atom_c, bSG_sC[(None, buf)], bSG_gC[(None, (0, s))])
                store_pipeline.producer_commit()
                store_pipeline.producer_acquire()
            epi_barrier.arrive_and_wait()

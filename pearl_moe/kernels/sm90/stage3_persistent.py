"""Stage 3 (sm_90a): persistent, warp-specialized grouped GEMM with a tile scheduler.

What changed since stage 2
--------------------------
* **Persistent CTAs.** The grid is one CTA per SM (132 on an H200). Each CTA walks the ragged
  tile list with :class:`pearl_moe.kernels.scheduler.TileScheduler` (tile ``c``,
  ``c + 132``, ...), reading the offsets on the device. No empty CTAs, one prologue per SM, and the
  ring stays full across tile boundaries: the producer starts loading tile i+1 while the consumers
  still multiply (and store) tile i.
* **Warp specialization.** Warpgroup 0 is the TMA producer (only its first warp issues copies) and
  gives registers back with ``setmaxnreg.dec`` (40 per thread); the one or two consumer warpgroups
  run wgmma and the epilogue with ``setmaxnreg.inc`` (232 per thread) for the fp32 accumulator.
  The two sides talk only through the full/empty mbarriers of the ring::

      TMA producer warp --(full[s], tx bytes)--> MMA warpgroups --(empty[s])--> TMA producer warp
      MMA warpgroups --stmatrix--> epilogue buffers --TMA store--> out (clipped at expert ends)

* Ring depth and tile shape are the knobs ("bytes in flight"): with tile 128 x 128 x 64 every ring
  entry holds 32 KB, so ``ring_depth`` entries keep ``ring_depth x 32 KB`` of loads in flight per
  SM; at decode, where each expert has a handful of rows, that is what hides HBM latency. Up to 6
  entries fit next to the 24 KB epilogue buffer (see :mod:`pearl_moe.config`).

* The schedule is static: CTA ``c`` takes tiles ``c, c + C, ...``, so the CTAs that run side by
  side work on neighbouring tiles, which read the same B boxes (L2 hits after the first); with
  ``GemmConfig.n_group`` neighbouring tiles form groups of n tiles instead (scheduler ``decode``).

Stages 4-7 add no kernel: they are options of this one (see :mod:`pearl_moe.kernels.ladder`),
each in its own module: the direct store (:mod:`.direct_store`), B entries of two K tiles
(:mod:`.wide_b`) and the split accumulator's two consumer warpgroups (:mod:`.split_accumulator`);
64-row tiles need no new code on Hopper. The options beyond the post that the autotuner uses, ``shift_a_box`` and tiles of 8-32
rows, live here and in :mod:`.common` (``_a_box_row``, ``a_mma_layout``); so do the prefill
options: 256-row tiles (two consumer warpgroups of 128 rows, :mod:`.common`) and clusters of two
CTAs that share one operand tile by TMA multicast (``cluster_n`` / ``cluster_m``:
``_cluster_tile``, the multicast masks and partitions in the producer, the empty barriers of
``_tma_pipeline``). The token gather (``gather_a``: A's rows through an index, by cp.async) is in
:mod:`.gather_a`.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ...config import GemmConfig
from .. import scheduler
from ..host import placeholder_ptr
from ..ladder import LAST_STAGE
from .common import WARPGROUP_THREADS
from .direct_store import DirectStoreEpilogue
from .gather_a import GatherA
from .split_accumulator import SplitAccumulator
from .stage2_grouped import GroupedGemmKernel
from .wide_b import WideBEntries

__all__ = ["PersistentGroupedGemmKernel", "build", "compile_kernel", "compile_fake", "launch"]


class PersistentGroupedGemmKernel(
    GatherA, DirectStoreEpilogue, WideBEntries, SplitAccumulator, GroupedGemmKernel
):
    """Stage 2's math and epilogue inside a persistent, warp-specialized loop.

    The options of stages 4-7 are switched at compile time by the config: the epilogue
    (``store_tile``: TMA store or :meth:`store_tile_direct`), the B ring (the producer's loads /
    ``mma_tile``: one K tile per entry or :class:`WideBEntries`), the consumers (one tile
    at a time, or :class:`SplitAccumulator`), and how A arrives (TMA boxes, or rows gathered
    through an index by :class:`GatherA`).
    """

    max_stage = LAST_STAGE

    def __init__(self, config: GemmConfig, sms: int = 132, stage: int = LAST_STAGE):
        self.max_stage = stage  # the course stage the config is checked against (3-7)
        super().__init__(config)
        if sms % self.cluster_size:
            raise ValueError(
                f"a grid of {sms} CTAs is not a whole number of clusters of {self.cluster_size}"
            )
        self.sms = sms
        self.producer_warpgroups = 1
        self.threads_per_cta = (self.producer_warpgroups * WARPGROUP_THREADS) + self.num_mma_threads
        self.load_warp = 0
        self.store_warp = self.producer_warpgroups * 4  # first warp of the first MMA warpgroup
        self.producer_registers = 40
        self.consumer_registers = 232
        self.gather_a = config.gather_a
        if self.gather_a:  # the whole producer warpgroup copies A (see gather_a.py)
            self.producer_registers, self.consumer_registers = self._gather_registers()

    # ------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        offs_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        idx_ptr: cute.Pointer,
        rows: cutlass.Int32,
        n: cutlass.Constexpr,
        k: cutlass.Constexpr,
        experts: cutlass.Constexpr,
        stream: cuda.CUstream,
    ):
        """``rows``: rows of the grouped problem (and of ``out``). ``idx_ptr``: with
        ``gather_a``, the ``rows`` int32 entries of ``a_index`` (row ``r`` of A is row
        ``a_index[r]`` of ``x`` at ``a_ptr``); otherwise unused (any pointer)."""
        self._setup()
        mA, mW, mOffs, mC3 = self.grouped_tensors(
            a_ptr, w_ptr, offs_ptr, c_ptr, rows, n, k, experts
        )
        # (rows, n_out): out as it is, for the direct store (n_out = n / 2 with a fused activation)
        n_out = self.config.output_columns(n)
        mC = cute.make_tensor(c_ptr, cute.make_layout((rows, n_out), stride=(n_out, 1)))
        gather_copy_a, mIdx = None, None
        if cutlass.const_expr(self.gather_a):
            # A stays a plain tensor (x, read by cp.async through the index; its row extent is
            # nominal: the index picks the rows), no TMA descriptor
            tma_atom_a, tma_a = None, mA
            gather_copy_a = self._make_gather_copy()
            mIdx = cute.make_tensor(idx_ptr, cute.make_layout(rows))
        else:
            tma_atom_a, tma_a = self._tma_load_atom(
                mA, self.a_smem_layout, (self.tile_m, self.tile_k), multicast=self.cluster_n
            )
        tma_atom_b, tma_b = self._tma_load_atom(
            mW, self.b_smem_layout, (self.tile_n, self.tile_k * self.b_k_tiles),
            multicast=self.cluster_m,
        )  # fmt: skip
        tma_atom_c, tma_c3 = self._tma_store_atom(mC3)
        self.experts = experts
        self.n_tiles = (n + self.tile_n - 1) // self.tile_n
        # the scheduler hands out the tiles of a cluster: cluster_n neighbouring n tiles of the
        # same rows (a last, odd n tile leaves one CTA a tile past n: its B box reads zeros and
        # its stores are clipped), or cluster_m neighbouring m tiles of one expert under the same
        # weights (an odd count leaves one CTA rows past the expert: computed, never stored)
        self.cluster_n_tiles = (self.n_tiles + self.cluster_n - 1) // self.cluster_n
        self.k_tiles = (k + self.tile_k - 1) // self.tile_k
        self.b_entries_per_tile = (self.k_tiles + self.b_k_tiles - 1) // self.b_k_tiles
        # clusters only where asked for: the kernels without them launch as before
        cluster = {"cluster": [self.cluster_size, 1, 1]} if self.cluster_size > 1 else {}
        self.kernel(
            tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c3, mC, mOffs,
            self.tiled_mma, self.a_smem_layout, self.b_smem_layout, self.epi_smem_layout,
            self.a_mma_layout, gather_copy_a, mIdx,
        ).launch(
            grid=(self.sms, 1, 1),
            block=[self.threads_per_cta, 1, 1],
            min_blocks_per_mp=1,
            stream=stream,
            use_pdl=self.config.pdl,
            **cluster,
        )  # fmt: skip

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mW_nke: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC3: cute.Tensor,
        mC_mn: cute.Tensor,
        mOffs: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        epi_smem_layout: cute.ComposedLayout,
        a_mma_layout: cute.ComposedLayout,
        tiled_copy_a: cute.TiledCopy,
        mIdx: cute.Tensor,
    ):
        """``tiled_copy_a`` / ``mIdx``: with ``gather_a``, the cp.async copy of A and ``a_index``
        (``mA_mk`` is then ``x``, read through it); None otherwise."""
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS)
        cta, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        # a cluster's CTAs are neighbours in the grid: cluster cta // size, rank cta % size
        rank = cta % self.cluster_size
        if warp_idx == self.load_warp:
            if cutlass.const_expr(not self.gather_a):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            if cutlass.const_expr(not self.direct_store):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        sA, sB, sC, barriers = self.allocate_smem(
            a_smem_layout, b_smem_layout, epi_smem_layout, a_mma_layout
        )
        # Each ring entry is released by the warps of the one tile that read it.
        if cutlass.const_expr(self.gather_a):
            ab_pipeline = self.make_gather_pipeline(
                barriers, self.mma_threads_per_tile // 32, b_smem_layout
            )
        else:
            ab_pipeline = self.make_ab_pipeline(
                barriers, self.mma_threads_per_tile // 32, a_smem_layout, b_smem_layout
            )
        b_pipeline = ab_pipeline
        if cutlass.const_expr(self.wide_b):
            b_pipeline = self._make_b_pipeline(
                barriers, self.mma_threads_per_tile // 32, b_smem_layout
            )
        # The ragged tile list, with the expert offsets clamped into [0, rows] (see scheduler).
        # With clusters it is a list of cluster tiles (cluster_n n tiles wide, or cluster_m
        # row blocks tall), walked by the clusters: both CTAs of one see the same expert and
        # rows, in the same order.
        sched = scheduler.TileScheduler(
            mOffs,
            cute.size(mA_mk, mode=[0]),
            self.experts,
            self.tile_m * self.cluster_m,
            self.cluster_n_tiles,
            ctas // self.cluster_size,
            self.config.walk,
            self.config.n_group,
        )
        cluster = cta // self.cluster_size
        if cutlass.const_expr(self.config.pdl):
            # A programmatic dependent launch: everything above (descriptor prefetch, barrier
            # setup) may have run while the previous kernel finished; nothing it wrote (the
            # offsets, A) is read, and nothing is written, before it has completed. Then the
            # next dependent may launch: its CTAs wait in turn (a GEMM's take SMs only as this
            # kernel's CTAs leave them; the shared memory of two does not fit one SM).
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        # ============ TMA producer warpgroup ============
        if warpgroup < self.producer_warpgroups:
            cute.arch.setmaxregister_decrease(self.producer_registers)
            if cutlass.const_expr(self.gather_a):
                # all four warps: A by cp.async through the index, B by TMA (warp 0)
                self.produce_gather_a(
                    ab_pipeline, sched, cluster, rank, tiled_copy_a, mA_mk, mIdx, sA,
                    tma_atom_b, mW_nke, sB, tidx, warp_idx,
                )  # fmt: skip
            else:
                if warp_idx == self.load_warp:
                    a_state = pipeline.make_pipeline_state(
                        pipeline.PipelineUserType.Producer, self.ring_depth
                    )
                    b_state = pipeline.make_pipeline_state(
                        pipeline.PipelineUserType.Producer, self.b_ring_depth
                    )
                    a_mcast_mask, b_mcast_mask = None, None
                    if cutlass.const_expr(self.cluster_n > 1):
                        # A to mode 2 (N) of the cluster: every CTA of this one's rows
                        a_mcast_mask = cute.nvgpu.cpasync.create_tma_multicast_mask(
                            self.cluster_layout_vmnk(), (0, 0, rank, 0), mcast_mode=2
                        )
                    if cutlass.const_expr(self.cluster_m > 1):
                        # B to mode 1 (M) of the cluster: every CTA of this one's columns
                        b_mcast_mask = cute.nvgpu.cpasync.create_tma_multicast_mask(
                            self.cluster_layout_vmnk(), (0, rank, 0, 0), mcast_mode=1
                        )
                    tile, expert, first = sched.first_tile(cluster)
                    while expert < self.experts:
                        m_tile, n_tile, row0, valid = self._cluster_tile(
                            sched, tile, expert, first, rank
                        )
                        # (tile_m, tile_k, k_tiles): A rows from a_row0 (the tile's first row, or
                        # earlier so that the box ends inside A)
                        gA = cute.local_tile(
                            cute.domain_offset((self._a_box_row(row0, sched.rows), 0), mA_mk),
                            (self.tile_m, self.tile_k),
                            (0, None),
                        )
                        # (tile_n, tile_k * b_k_tiles, k_tiles / b_k_tiles)
                        gB = cute.local_tile(
                            mW_nke[(None, None, expert)],
                            (self.tile_n, self.tile_k * self.b_k_tiles),
                            (n_tile, None),
                        )
                        # (TMA, ring_depth), (TMA, k_tiles): with cluster_n=2, this CTA's half of
                        # each A box (the TMA multicasts it to both)
                        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                            tma_atom_a, rank % self.cluster_n, cute.make_layout(self.cluster_n),
                            cute.group_modes(self._a_box_view(sA, a_smem_layout), 0, 2), cute.group_modes(gA, 0, 2),
                        )  # fmt: skip
                        # (TMA, b_ring_depth), (TMA, k_tiles / b_k_tiles)
                        # (with cluster_m=2, this CTA's half of each B box, multicast to both)
                        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                            tma_atom_b, rank % self.cluster_m, cute.make_layout(self.cluster_m),
                            cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
                        )  # fmt: skip
                        if cutlass.const_expr(self.wide_b):
                            a_state, b_state = self.load_k_tiles_wide_b(
                                ab_pipeline, b_pipeline, a_state, b_state,
                                tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB,
                            )  # fmt: skip
                        else:
                            a_state.reset_count()
                            for _ in cutlass.range(self.k_tiles, unroll=1):
                                self._issue_loads(
                                    ab_pipeline, a_state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB,
                                    tBsB, a_mcast_mask, b_mcast_mask,
                                )  # fmt: skip
                                a_state.advance()
                        tile, expert, first = sched.next_tile(tile, expert, first)
                    ab_pipeline.producer_tail(a_state)
                    if cutlass.const_expr(self.wide_b):
                        b_pipeline.producer_tail(b_state)

        # ============ MMA consumer + epilogue warpgroups ============
        if warpgroup >= self.producer_warpgroups:
            cute.arch.setmaxregister_increase(self.consumer_registers)
            consumer_tidx = tidx - self.producer_warpgroups * WARPGROUP_THREADS
            # Split accumulator: each consumer warpgroup owns whole tiles (slot 0 or 1); otherwise
            # the consumer warpgroups share every tile (slot 0) and split its rows. Both come from
            # the warp-uniform warpgroup index, not from the thread index: the compiler then
            # knows every warp takes the same branches and keeps the ring positions and the
            # wgmma descriptors in uniform registers (from the thread index it built each
            # descriptor in ordinary registers and moved it over, four R2UR per wgmma).
            consumer_warpgroup = warpgroup - self.producer_warpgroups
            slot = cutlass.Int32(0)
            mma_warpgroup = consumer_warpgroup
            mma_tidx = consumer_tidx
            if cutlass.const_expr(self.split_accumulator):
                slot = consumer_warpgroup
                mma_warpgroup = 0
                mma_tidx = consumer_tidx % WARPGROUP_THREADS
            thr_mma = tiled_mma.get_slice(mma_warpgroup * WARPGROUP_THREADS)
            if cutlass.const_expr(self.swap_ab):
                # the weights are the wgmma's A, the tile's tokens its B:
                # (MMA, MMA_N = tile_m / wgmma N, MMA_K, ring_depth) of the A ring's tile_m rows
                tCrA = tiled_mma.make_fragment_B(
                    thr_mma.partition_B(self._a_box_view(sA, a_smem_layout))
                )
                # (MMA, MMA_M = tile_n / 64, MMA_K * b_k_tiles, b_ring_depth)
                tCrB = tiled_mma.make_fragment_A(thr_mma.partition_A(sB))
                # (MMA, MMA_M, MMA_N): weight rows x tokens
                acc = cute.make_rmem_tensor(
                    thr_mma.partition_shape_C((self.tile_n, self.tile_m)), self.acc_dtype
                )
            else:
                # (MMA, MMA_M, MMA_K, ring_depth)
                tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
                # (MMA, MMA_N, MMA_K * b_k_tiles, b_ring_depth)
                tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
                # (MMA, MMA_M, MMA_N)
                acc = cute.make_rmem_tensor(
                    thr_mma.partition_shape_C((self.mma_m, self.tile_n)), self.acc_dtype
                )
            store_pipeline = None
            epi_barrier = None
            if cutlass.const_expr(not self.direct_store):
                store_pipeline = pipeline.PipelineTmaStore.create(
                    num_stages=self.epi_buffers,
                    producer_group=pipeline.CooperativeGroup(
                        pipeline.Agent.Thread, self.num_mma_threads
                    ),
                )
                epi_barrier = pipeline.NamedBarrier(
                    barrier_id=self.epilogue_barrier_id, num_threads=self.num_mma_threads
                )
            consumer = pipeline.PipelineUserType.Consumer
            states = (
                pipeline.make_pipeline_state(consumer, self.ring_depth),  # A (or A/B) read
                pipeline.make_pipeline_state(consumer, self.ring_depth),  # A (or A/B) release
                pipeline.make_pipeline_state(consumer, self.b_ring_depth),  # wide B read
                pipeline.make_pipeline_state(consumer, self.b_ring_depth),  # wide B release
            )
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            tiles_done = cutlass.Int32(0)
            tile, expert, first = sched.first_tile(cluster)
            while expert < self.experts:
                m_tile, n_tile, row0, valid = self._cluster_tile(sched, tile, expert, first, rank)
                # the next tile is found before this one is stored: the split accumulator hands
                # its turn over only when the other warpgroup has a tile to take
                next_tile, next_expert, next_first = sched.next_tile(tile, expert, first)
                mine = True  # split accumulator: every other tile belongs to the other warpgroup
                if cutlass.const_expr(self.split_accumulator):
                    mine = tiles_done % 2 == slot
                if mine:
                    if cutlass.const_expr(self.split_accumulator):
                        if tiles_done > 0:
                            self._wait_turn(slot)
                    acc.fill(0.0)
                    states = self.mma_tile(
                        tiled_mma, acc, tCrA, tCrB, ab_pipeline, b_pipeline, states
                    )
                    if cutlass.const_expr(self.split_accumulator):
                        if next_expert < self.experts:
                            self._give_turn(slot)
                    self.store_tile(
                        tiled_mma, acc, sC, tma_atom_c, mC3, mC_mn, row0, valid, n_tile,
                        self._a_box_row(row0, sched.rows), mma_tidx, store_pipeline, epi_barrier,
                        warp_idx == self.store_warp, tiles_done,
                    )  # fmt: skip
                else:
                    states = self._skip_tile(states)
                tiles_done = tiles_done + 1
                tile, expert, first = next_tile, next_expert, next_first
            if cutlass.const_expr(not self.direct_store):
                if warp_idx == self.store_warp:
                    store_pipeline.producer_tail()

    # ------------------------------------------------------------------ one tile, per option
    @cute.jit
    def _cluster_tile(self, sched, tile, expert, first, rank):
        """``(m_tile, n_tile, row0, valid)`` of this CTA's part of a cluster tile: with
        ``cluster_n=2`` n tile ``2 t + rank`` of the same rows; with ``cluster_m=2`` the
        ``rank``-th ``tile_m`` rows of a ``2 x tile_m``-row tile (``valid`` 0 where the expert
        ends before them: the CTA still loads its half of B for its partner, and stores
        nothing). Without clusters, the scheduler's tile."""
        m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
        if cutlass.const_expr(self.cluster_n > 1):
            n_tile = n_tile * self.cluster_n + rank
        if cutlass.const_expr(self.cluster_m > 1):
            m_tile = m_tile * self.cluster_m + rank
            mine = valid - rank * self.tile_m  # rows of the cluster tile below this CTA's start
            # with no rows of its own the CTA keeps the cluster tile's first row, so that its A
            # box stays inside A (a box wholly past A's end would rely on the TMA zero-filling it)
            row0 = cutlass.select_(mine > 0, row0 + rank * self.tile_m, row0)
            valid = cutlass.max(cutlass.min(mine, self.tile_m), 0)
        return m_tile, n_tile, row0, valid

    @cute.jit
    def _a_box_row(self, row0, rows):
        """First row of the tile's A box: ``row0``, or with ``shift_a_box`` the latest start
        that keeps the whole box inside A (TMA boxes that cross the tensor's end are slow)."""
        a_row0 = row0
        if cutlass.const_expr(self.shift_a_box):
            a_row0 = cutlass.max(cutlass.min(row0, rows - self.tile_m), 0)
        return a_row0

    @cute.jit
    def mma_tile(self, tiled_mma, acc, tCrA, tCrB, ab_pipeline, b_pipeline, states):
        """All K tiles of one tile into ``acc``, releasing each ring entry once its wgmma is done."""
        a_read, a_release, b_read, b_release = states
        if cutlass.const_expr(self.wide_b):
            a_read, a_release, b_read, b_release = self.mma_k_loop_wide_b(
                tiled_mma, acc, tCrA, tCrB, ab_pipeline, b_pipeline,
                a_read, a_release, b_read, b_release,
            )  # fmt: skip
        else:
            for kt in cutlass.range(self.k_tiles, unroll=1):
                ab_pipeline.consumer_wait(a_read)
                if cutlass.const_expr(self.gather_a):
                    # A was written by cp.async (generic proxy); wgmma reads via the async proxy
                    cute.arch.fence_proxy("async.shared", space="cta")
                self.mma_k_tile(tiled_mma, acc, tCrA, tCrB, a_read.index)
                a_read.advance()
                # Keep one k tile of wgmma in flight; the previous one is done: release its entry.
                cute.nvgpu.warpgroup.wait_group(1)
                if kt > 0:
                    ab_pipeline.consumer_release(a_release)
                    a_release.advance()
            cute.nvgpu.warpgroup.wait_group(0)
            ab_pipeline.consumer_release(a_release)
            a_release.advance()
        return a_read, a_release, b_read, b_release

    @cute.jit
    def store_tile(
        self, tiled_mma, acc, sC, tma_atom_c, mC3, mC_mn, row0, valid, n_tile, a_row0, mma_tidx,
        store_pipeline, epi_barrier, is_store_warp, tiles_done,
    ):  # fmt: skip
        """The epilogue of one tile: straight from registers (stage 4 on) or through SMEM + TMA.

        Accumulator row ``r`` holds A row ``a_row0 + r``; the tile's rows are ``[row0, row0 +
        valid)``.
        """
        if cutlass.const_expr(self.swap_ab):
            self._store_swapped(
                tiled_mma, acc, mC_mn, a_row0, row0 - a_row0, valid, n_tile, mma_tidx
            )
        elif cutlass.const_expr(self.direct_store):
            self.store_tile_direct(
                tiled_mma, acc, mC_mn, a_row0, row0 - a_row0, valid, n_tile, mma_tidx
            )
        else:
            # (tile_m, tile_n): rows past the expert's end fall outside the clipped view
            gC = cute.local_tile(
                cute.domain_offset((self.tile_m - valid, 0), mC3[(None, None, row0 + valid)]),
                (self.tile_m, self.tile_n),
                (0, n_tile),
            )
            self.epilogue_tile(
                tiled_mma, acc, sC, tma_atom_c, gC, mma_tidx, store_pipeline, epi_barrier,
                is_store_warp, tiles_done * (self.tile_n // self.epi_tile[1]),
            )  # fmt: skip


# ---------------------------------------------------------------------------- host launcher
def build(
    config: GemmConfig, sms: int = 132, stage: int = LAST_STAGE
) -> PersistentGroupedGemmKernel:
    """The kernel for a grid of ``sms`` CTAs; ``config`` is checked against course stage
    ``stage`` (3-7: which options it may use)."""
    return PersistentGroupedGemmKernel(config, sms, stage)


def compile_kernel(
    config: GemmConfig,
    n: int,
    k: int,
    experts: int,
    sms: int | None = None,
    stage: int = LAST_STAGE,
):
    """Compile for fixed ``(n, k, experts)`` and grid size ``sms`` (H200: 132). No GPU needed.

    Run-time arguments: ``(a_ptr, w_ptr, offsets_ptr, out_ptr, index_ptr, rows, stream)``;
    ``index_ptr`` is ``a_index`` with ``gather_a`` and ignored otherwise."""
    bf16 = cutlass.BFloat16
    return cute.compile(
        build(config, sms or 132, stage), placeholder_ptr(bf16, 16), placeholder_ptr(bf16, 16), placeholder_ptr(cutlass.Int32, 4),
        placeholder_ptr(bf16, 16), placeholder_ptr(cutlass.Int32, 4), 1, n, k, experts, cuda.CUstream(0),
    )  # fmt: skip


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int, stage: int = LAST_STAGE):
    """Compile with placeholder pointers (CPU inspection: PTX / CUBIN / SASS in .artifacts)."""
    del m
    return compile_kernel(config, n, k, experts, stage=stage)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream, a_index=None):
    """One persistent launch; the scheduler reads the offsets on the device.

    With ``a_index`` (a kernel compiled with ``gather_a``) ``A`` is ``x`` and row ``r`` of the
    problem is ``x[a_index[r]]``: the problem has ``a_index.shape[0]`` rows (``out``'s)."""
    from ..host import bf16_ptr, i32_ptr

    del host_offsets
    index_ptr = i32_ptr(end_offsets) if a_index is None else i32_ptr(a_index)  # unused without
    compiled(
        bf16_ptr(A), bf16_ptr(W), i32_ptr(end_offsets), bf16_ptr(out), index_ptr, out.shape[0],
        stream,
    )  # fmt: skip

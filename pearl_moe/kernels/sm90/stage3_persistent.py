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
  entries fit next to the 24 KB epilogue buffer (see :mod:`pearl_moe.budget`).

* The schedule (``GemmConfig.schedule``): static by default; ``"dynamic"`` has the producer warp
  claim each next tile from a counter and publish it to the consumers through two shared-memory
  slots (notebook 09, section 12, measures both); ``"scattered"`` is a control experiment;
  ``"lockstep"`` keeps the static tiles but has each producer wait, before each tile, for its two
  neighbouring CTAs to reach the same round (:meth:`~pearl_moe.kernels.scheduler.TileScheduler.lockstep_wait`).

Stages 4-7 add no kernel: they are options of this one (see :mod:`pearl_moe.kernels.ladder`),
each in its own module: the direct store (:mod:`.direct_store`), B entries of two K tiles
(:mod:`.wide_b`) and the ping-pong consumers (:mod:`.pingpong`); 64-row tiles need no new code
on Hopper. The options beyond the post that the autotuner uses, ``shift_a_box`` and tiles of 8-32
rows, live here and in :mod:`.common` (``_a_box_row``, ``a_mma_layout``).
"""

from __future__ import annotations

import math

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ...config import GemmConfig
from .. import scheduler
from ..host import COUNTER_WORDS, MAX_LOCKSTEP_CTAS, placeholder_ptr
from ..ladder import LAST_STAGE
from .common import TILE_SLOTS, WARPGROUP_THREADS
from .direct_store import DirectStoreEpilogue
from .pingpong import PingPongTurns
from .stage2_grouped import Sm90GroupedGemm
from .wide_b import WideBLoads

__all__ = ["Sm90PersistentGroupedGemm", "build", "compile_kernel", "compile_fake", "launch"]


class Sm90PersistentGroupedGemm(DirectStoreEpilogue, WideBLoads, PingPongTurns, Sm90GroupedGemm):
    """Stage 2's math and epilogue inside a persistent, warp-specialized loop.

    The options of stages 4-7 are switched at compile time by the config: the epilogue
    (``_store_tile``: TMA store or :meth:`_store_direct`), the B ring (``_load_tile`` /
    ``_mma_tile``: one K tile per entry or :class:`WideBLoads`), and the consumers (one tile
    at a time, or :class:`PingPongTurns`).
    """

    max_stage = LAST_STAGE

    def __init__(self, config: GemmConfig, sms: int = 132):
        super().__init__(config)
        if config.schedule == "lockstep" and sms > MAX_LOCKSTEP_CTAS:
            raise ValueError(
                f"schedule='lockstep' keeps one word per CTA for at most {MAX_LOCKSTEP_CTAS} "
                f"CTAs, got a grid of {sms}"
            )
        self.sms = sms
        # schedule="scattered": CTA c starts at tile (c * stride) mod sms, a stride coprime with
        # sms and near sms / 2, so tiles next to each other go to CTAs far apart
        self.scatter_stride = next(
            p for p in range(sms // 2 + 1, 2 * sms + 2) if math.gcd(p, sms) == 1
        )
        self.producer_warpgroups = 1
        self.threads_per_cta = (self.producer_warpgroups * WARPGROUP_THREADS) + self.num_mma_threads
        self.load_warp = 0
        self.store_warp = self.producer_warpgroups * 4  # first warp of the first MMA warpgroup
        self.producer_registers = 40
        self.consumer_registers = 232

    # ------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        offs_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        counter_ptr: cute.Pointer,
        rows: cutlass.Int32,
        n: cutlass.Constexpr,
        k: cutlass.Constexpr,
        experts: cutlass.Constexpr,
        stream: cuda.CUstream,
    ):
        self._setup()
        mA, mW, mOffs, mC3 = self._grouped_tensors(
            a_ptr, w_ptr, offs_ptr, c_ptr, rows, n, k, experts
        )
        # (rows, n): out as it is, for the direct store
        mC = cute.make_tensor(c_ptr, cute.make_layout((rows, n), stride=(n, 1)))
        # (COUNTER_WORDS,): the dynamic schedule's tile counter and the lockstep schedule's words
        # (all 0 between launches; unused when static)
        mCounter = cute.make_tensor(counter_ptr, cute.make_layout(COUNTER_WORDS))
        tma_atom_a, tma_a = self._tma_load_atom(mA, self.a_smem_layout, (self.tile_m, self.tile_k))
        tma_atom_b, tma_b = self._tma_load_atom(
            mW, self.b_smem_layout, (self.tile_n, self.tile_k * self.b_k_tiles)
        )
        tma_atom_c, tma_c3 = self._tma_store_atom(mC3)
        self.experts = experts
        self.n_tiles = (n + self.tile_n - 1) // self.tile_n
        self.k_tiles = (k + self.tile_k - 1) // self.tile_k
        self.b_entries_per_tile = (self.k_tiles + self.b_k_tiles - 1) // self.b_k_tiles
        self.kernel(
            tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c3, mC, mOffs, mCounter,
            self.tiled_mma, self.a_smem_layout, self.b_smem_layout, self.epi_smem_layout,
            self.a_mma_layout,
        ).launch(
            grid=(self.sms, 1, 1),
            block=[self.threads_per_cta, 1, 1],
            min_blocks_per_mp=1,
            stream=stream,
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
        mCounter: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        epi_smem_layout: cute.ComposedLayout,
        a_mma_layout: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS)
        cta, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        if warp_idx == self.load_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            if cutlass.const_expr(not self.direct_store):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        sA, sB, sC, barriers, (tile_barriers, tile_slots) = self._allocate_smem(
            a_smem_layout, b_smem_layout, epi_smem_layout, a_mma_layout
        )
        # Each ring entry is released by the warps of the one tile that read it.
        ab_pipeline = self._make_ab_pipeline(
            barriers, self.mma_threads_per_tile // 32, a_smem_layout, b_smem_layout
        )
        b_pipeline = ab_pipeline
        if cutlass.const_expr(self.wide_b):
            b_pipeline = self._make_b_pipeline(
                barriers, self.mma_threads_per_tile // 32, b_smem_layout
            )
        # The ragged tile list, with the expert offsets clamped into [0, rows] (see scheduler).
        sched = scheduler.TileScheduler(
            mOffs,
            cute.size(mA_mk, mode=[0]),
            self.experts,
            self.tile_m,
            self.n_tiles,
            ctas,
            self.config.walk,
        )
        # Dynamic schedule: the producer warp claims each next tile from the counter and
        # publishes it in a TILE_SLOTS-deep ring of shared-memory slots; every consumer warp reads
        # every index (ping-pong warpgroups skip every other tile, but walk them all).
        dynamic = self.config.schedule == "dynamic"
        lockstep = self.config.schedule == "lockstep"
        tile_pipeline = None
        sTile = None
        if cutlass.const_expr(dynamic):
            tile_pipeline = pipeline.PipelineAsync.create(
                barrier_storage=tile_barriers,
                num_stages=TILE_SLOTS,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.num_mma_threads // 32
                ),
            )
            # (TILE_SLOTS,): the published tile indices
            sTile = cute.make_tensor(tile_slots, cute.make_layout(TILE_SLOTS))

        # ============ TMA producer warpgroup ============
        if warpgroup < self.producer_warpgroups:
            cute.arch.setmaxregister_decrease(self.producer_registers)
            if warp_idx == self.load_warp:
                a_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.ring_depth
                )
                b_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.b_ring_depth
                )
                tile, expert, first = sched.first_tile(self._first_slot(cta))
                total = cutlass.Int32(0)
                tile_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, TILE_SLOTS
                )
                next_tile = tile + ctas
                pending = cutlass.Int32(0)
                rnd = cutlass.Int32(0)  # lockstep: this CTA's round (tiles started so far)
                if cutlass.const_expr(dynamic or lockstep):
                    total = sched.total_tiles()
                if cutlass.const_expr(dynamic):
                    pending = total
                    if expert < self.experts:
                        pending = sched.claim_issue(mCounter.iterator, total)
                    next_tile = sched.claim_result(pending)
                while expert < self.experts:
                    if cutlass.const_expr(lockstep):
                        # start this tile's loads once both neighbours have reached this round
                        sched.lockstep_wait(mCounter.iterator, cta, rnd, total)
                        rnd = rnd + 1
                    if cutlass.const_expr(dynamic):
                        # publish the next tile before loading this one, so the consumers know
                        # it when they start this tile (they walk to it while they multiply) ...
                        tile_pipeline.producer_acquire(tile_state)
                        with cute.arch.elect_one():
                            sTile[tile_state.index] = next_tile
                            tile_pipeline.producer_commit(tile_state)
                        tile_state.advance()
                        # ... and claim the one after it now: the atomic's round trip overlaps
                        # this tile's loads instead of stalling them
                        pending = total
                        if next_tile < total:
                            pending = sched.claim_issue(mCounter.iterator, total)
                    else:
                        next_tile = tile + ctas
                    m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
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
                    # (TMA, ring_depth), (TMA, k_tiles)
                    tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                        tma_atom_a, 0, cute.make_layout(1),
                        cute.group_modes(self._a_box_view(sA, a_smem_layout), 0, 2), cute.group_modes(gA, 0, 2),
                    )  # fmt: skip
                    # (TMA, b_ring_depth), (TMA, k_tiles / b_k_tiles)
                    tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                        tma_atom_b, 0, cute.make_layout(1),
                        cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
                    )  # fmt: skip
                    if cutlass.const_expr(self.wide_b):
                        a_state, b_state = self._load_tile_wide_b(
                            ab_pipeline, b_pipeline, a_state, b_state,
                            tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB,
                        )  # fmt: skip
                    else:
                        a_state.reset_count()
                        for _ in cutlass.range(self.k_tiles, unroll=1):
                            self._issue_loads(
                                ab_pipeline, a_state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB
                            )
                            a_state.advance()
                    tile = next_tile
                    if cutlass.const_expr(dynamic):
                        next_tile = sched.claim_result(pending)
                    expert, first = sched.seek(tile, expert, first)
                ab_pipeline.producer_tail(a_state)
                if cutlass.const_expr(self.wide_b):
                    b_pipeline.producer_tail(b_state)
                if cutlass.const_expr(dynamic):
                    tile_pipeline.producer_tail(tile_state)
                if cutlass.const_expr(lockstep):
                    sched.lockstep_done(mCounter.iterator)

        # ============ MMA consumer + epilogue warpgroups ============
        if warpgroup >= self.producer_warpgroups:
            cute.arch.setmaxregister_increase(self.consumer_registers)
            consumer_tidx = tidx - self.producer_warpgroups * WARPGROUP_THREADS
            # Ping-pong: each consumer warpgroup owns whole tiles (slot 0 or 1); otherwise the
            # consumer warpgroups share every tile (slot 0) and split its rows.
            slot = cutlass.Int32(0)
            mma_tidx = consumer_tidx
            if cutlass.const_expr(self.pingpong):
                slot = consumer_tidx // WARPGROUP_THREADS
                mma_tidx = consumer_tidx % WARPGROUP_THREADS
            thr_mma = tiled_mma.get_slice(mma_tidx // WARPGROUP_THREADS * WARPGROUP_THREADS)
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
            tile_read = pipeline.make_pipeline_state(consumer, TILE_SLOTS)
            tile, expert, first = sched.first_tile(self._first_slot(cta))
            while expert < self.experts:
                m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
                next_tile = tile + ctas
                if cutlass.const_expr(dynamic):
                    tile_pipeline.consumer_wait(tile_read)
                    next_tile = sTile[tile_read.index]
                    cute.arch.sync_warp()  # every lane has read the slot before it is released
                    with cute.arch.elect_one():
                        tile_pipeline.consumer_release(tile_read)
                    tile_read.advance()
                next_expert, next_first = sched.seek(next_tile, expert, first)
                mine = True  # ping-pong: every other tile belongs to the other warpgroup
                if cutlass.const_expr(self.pingpong):
                    mine = tiles_done % 2 == slot
                if mine:
                    if cutlass.const_expr(self.pingpong):
                        if tiles_done > 0:
                            self._wait_turn(slot)
                    acc.fill(0.0)
                    states = self._mma_tile(
                        tiled_mma, acc, tCrA, tCrB, ab_pipeline, b_pipeline, states
                    )
                    if cutlass.const_expr(self.pingpong):
                        if next_expert < self.experts:
                            self._give_turn(slot)
                    self._store_tile(
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
    def _first_slot(self, cta):
        """The CTA's first tile: its index, or scattered (``schedule="scattered"``, a control
        experiment: the static schedule without its neighbouring CTAs on neighbouring tiles)."""
        slot = cta
        if cutlass.const_expr(self.config.schedule == "scattered"):
            slot = (cta * self.scatter_stride) % self.sms
        return slot

    @cute.jit
    def _a_box_row(self, row0, rows):
        """First row of the tile's A box: ``row0``, or with ``shift_a_box`` the latest start
        that keeps the whole box inside A (TMA boxes that cross the tensor's end are slow)."""
        a_row0 = row0
        if cutlass.const_expr(self.shift_a_box):
            a_row0 = cutlass.max(cutlass.min(row0, rows - self.tile_m), 0)
        return a_row0

    @cute.jit
    def _mma_tile(self, tiled_mma, acc, tCrA, tCrB, ab_pipeline, b_pipeline, states):
        """All K tiles of one tile into ``acc``, releasing each ring entry once its wgmma is done."""
        a_read, a_release, b_read, b_release = states
        if cutlass.const_expr(self.wide_b):
            a_read, a_release, b_read, b_release = self._mma_tile_wide_b(
                tiled_mma, acc, tCrA, tCrB, ab_pipeline, b_pipeline,
                a_read, a_release, b_read, b_release,
            )  # fmt: skip
        else:
            for kt in cutlass.range(self.k_tiles, unroll=1):
                ab_pipeline.consumer_wait(a_read)
                self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, a_read.index)
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
    def _store_tile(
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
            self._store_direct(
                tiled_mma, acc, mC_mn, a_row0, row0 - a_row0, valid, n_tile, mma_tidx
            )
        else:
            # (tile_m, tile_n): rows past the expert's end fall outside the clipped view
            gC = cute.local_tile(
                cute.domain_offset((self.tile_m - valid, 0), mC3[(None, None, row0 + valid)]),
                (self.tile_m, self.tile_n),
                (0, n_tile),
            )
            self._epilogue(
                tiled_mma, acc, sC, tma_atom_c, gC, mma_tidx, store_pipeline, epi_barrier,
                is_store_warp, tiles_done * (self.tile_n // self.epi_tile[1]),
            )  # fmt: skip


# ---------------------------------------------------------------------------- host launcher
def build(config: GemmConfig, sms: int = 132) -> Sm90PersistentGroupedGemm:
    return Sm90PersistentGroupedGemm(config, sms)


def compile_kernel(config: GemmConfig, n: int, k: int, experts: int, sms: int | None = None):
    """Compile for fixed ``(n, k, experts)`` and grid size ``sms`` (H200: 132). No GPU needed."""
    bf16 = cutlass.BFloat16
    return cute.compile(
        build(config, sms or 132), placeholder_ptr(bf16, 16), placeholder_ptr(bf16, 16), placeholder_ptr(cutlass.Int32, 4),
        placeholder_ptr(bf16, 16), placeholder_ptr(cutlass.Int32, 4), 1, n, k, experts, cuda.CUstream(0),
    )  # fmt: skip


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int):
    """Compile with placeholder pointers (CPU inspection: PTX / CUBIN / SASS in .artifacts)."""
    del m
    return compile_kernel(config, n, k, experts)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream):
    """One persistent launch; the scheduler reads the offsets on the device (and, with the
    dynamic schedule, claims tiles from the stream's tile counter)."""
    from ..host import bf16_ptr, i32_ptr, tile_counter_ptr

    del host_offsets
    compiled(
        bf16_ptr(A), bf16_ptr(W), i32_ptr(end_offsets), bf16_ptr(out),
        tile_counter_ptr(A.device, stream), A.shape[0], stream,
    )  # fmt: skip

"""Scaffold of exercise ``07-split-slots`` (notebook 07a): a persistent 1-CTA GEMM on sm_100a.

One CTA computes 128 x 512 tiles of ``C = A @ B^T`` (A: m x k activations, B: 512 x k weights, C:
m x 512 bf16) in a persistent loop over the row tiles. A tile's fp32 accumulator is two 256-wide
UMMA atoms and fills all 512 TMEM columns, as the 2-CTA 256 x 512 tile of stage 7 does in each
CTA of its pair: there is one accumulator buffer, split into ``SLOTS = 2`` slots, slot ``s`` =
atom ``s`` = columns ``256 s`` to ``256 s + 255``, each with its own full/empty barrier pair (the
accumulator pipeline has one entry per slot).

Six warps: a TMA warp fills a ring of ``RING`` entries (A 128 x 64 and B 512 x 64 each), the MMA
warp issues the UMMAs, four epilogue warps drain TMEM ``EPI_N`` columns at a time and store bf16
straight to global memory, rows at or past ``m`` skipped. This module holds all of it except the
two functions the lesson is about, which :func:`launch` takes as arguments:

* ``mma_tile(tiled_mma, ab_consumer, acc_pipeline, acc_state, acc, tCrA, tCrB, k_tiles, hold)``,
  the MMA warp's part of one tile: every UMMA of the tile into the two slots (:func:`umma` issues
  one), the ring entries waited on and released, each slot acquired and committed. Returns
  ``(tiled_mma, ab_consumer, acc_state)``, the three values the tile loop carries.
* ``drain_tile(acc_pipeline, acc_state, epi)``, the epilogue's part of one tile: wait for each
  slot, then step by step read it out of TMEM (``epi.load(step)``) and store it
  (``epi.store(step)``), releasing the slot after its last read. Returns ``acc_state``.

Compiles on a CPU (``example_args`` gives placeholder pointers); nothing here has run on a GPU.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.memory import SmemAllocator, TmemAllocator
from cutlass.tensor_utils import LayoutEnum
from cutlass.utils.gemm.sm100 import transform_partitioned_tensor_layout

from pearl_moe.kernels.host import placeholder_ptr

BM, BN, BK = 128, 512, 64  # one CTA's tile; 512 fp32 columns = all of TMEM
ATOM_N = 256  # one UMMA is at most 256 wide: a K block is two UMMAs, atom s -> columns 256 s ...
SLOTS = 2  # accumulator pipeline entries: slot s = atom s's 256 columns
RING = 2  # A/B ring entries (16 KB of A + 64 KB of B each)
HOLD = max(1, RING // 2)  # K tiles atom 0 runs ahead on held entries (below RING)
EPI_N = 32  # columns per tcgen05.ld step: 512 / 32 = 16 steps, 8 per slot
CTAS = 148  # persistent grid: one CTA per SM
EPI_WARPS, MMA_WARP, TMA_WARP = (0, 1, 2, 3), 4, 5


@cute.jit
def umma(tiled_mma, acc, tCrA, tCrB, atom: cutlass.Constexpr, kb, index):
    """One UMMA: K block ``kb`` of ring entry ``index``, atom ``atom`` (B rows and accumulator
    columns ``256 atom`` to ``256 atom + 255``); it adds to the slot unless the ``ACCUMULATE``
    field of ``tiled_mma`` is off (the first K block of the slot's tile)."""
    cute.gemm(
        tiled_mma,
        acc[(None, 0, atom)],
        tCrA[(None, 0, kb, index)],
        tCrB[(None, atom, kb, index)],
        acc[(None, 0, atom)],
    )


class TileDrain:
    """The epilogue's view of one tile, for ``drain_tile``: ``steps`` steps of ``EPI_N`` columns
    (steps ``0 .. steps/2 - 1`` read slot 0, the rest slot 1). Each epilogue thread owns one row:
    ``load(step)`` reads that step's columns of it out of TMEM into registers (``tcgen05.ld``;
    ``cute.arch.fence_view_async_tmem_load()`` waits until the reads have landed), ``store(step)``
    converts them to bf16 and stores them, unless the row is at or past ``m``. There is one
    register buffer (32 fp32 a thread): a load overwrites it, a store writes what it holds, so each
    step must be stored before the next is loaded."""

    def __init__(self, t2r, tTR_tAcc, tTR_gC, tTR_cC, rAcc, rC, m):
        self.t2r, self.tTR_tAcc, self.tTR_gC, self.tTR_cC = t2r, tTR_tAcc, tTR_gC, tTR_cC
        self.rAcc, self.rC, self.m = rAcc, rC, m
        self.steps = cute.size(tTR_tAcc, mode=[3])

    @cute.jit
    def load(self, step: cutlass.Constexpr):
        cute.copy(self.t2r, self.tTR_tAcc[(None, None, None, step)], self.rAcc)

    @cute.jit
    def store(self, step: cutlass.Constexpr):
        self.rC.store(self.rAcc.load().to(cutlass.BFloat16))
        # 32x32b: each thread holds one row, so one check guards its whole store
        if self.tTR_cC[(None, None, None, step)][0][0] < self.m:
            cute.autovec_copy(self.rC, self.tTR_gC[(None, None, None, step)])


@cute.kernel
def gemm(
    tiled_mma: cute.TiledMma,
    tma_a: cute.CopyAtom,
    mA: cute.Tensor,
    tma_b: cute.CopyAtom,
    mB: cute.Tensor,
    mC: cute.Tensor,
    a_layout: cute.ComposedLayout,
    b_layout: cute.ComposedLayout,
    tx_bytes: cutlass.Constexpr,
    mma_tile: cutlass.Constexpr,
    drain_tile: cutlass.Constexpr,
):
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    smem = SmemAllocator()
    # (MMA, MMA_M, MMA_K, RING) and (MMA, MMA_N, MMA_K, RING)
    sA = smem.allocate_tensor(cutlass.BFloat16, a_layout.outer, 1024, a_layout.inner)
    sB = smem.allocate_tensor(cutlass.BFloat16, b_layout.outer, 1024, b_layout.inner)
    ring_bars = smem.allocate_array(cutlass.Int64, 2 * RING, byte_alignment=8)
    acc_bars = smem.allocate_array(cutlass.Int64, 2 * SLOTS, byte_alignment=8)
    tmem_base = smem.allocate_array(cutlass.Int32, 1, byte_alignment=4)

    ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
        barrier_storage=ring_bars,
        num_stages=RING,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
        tx_count=tx_bytes,
    ).make_participants()
    # MMA warp -> epilogue: one entry per slot; one elected thread per epilogue warp releases
    acc_pipeline = pipeline.PipelineUmmaAsync.create(
        barrier_storage=acc_bars,
        num_stages=SLOTS,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, len(EPI_WARPS)),
    )
    tmem = TmemAllocator(
        tmem_base,
        barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=2, num_threads=32 * 5),
        allocator_warp_id=EPI_WARPS[0],
    )

    thr_mma = tiled_mma.get_slice(0)
    tCrA = tiled_mma.make_fragment_A(sA)  # (MMA, MMA_M, MMA_K, RING)
    tCrB = tiled_mma.make_fragment_B(sB)  # (MMA, MMA_N, MMA_K, RING)
    # (MMA, MMA_M, MMA_N): MMA_N = 2 atoms; a layout until TMEM is allocated
    acc_fake = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((BM, BN)))
    m_tiles = cute.ceil_div(cute.size(mA, mode=[0]), BM)
    k_tiles = cute.size(mA, mode=[1]) // BK
    grid = cute.arch.grid_dim()[0]

    # ------------------------------------------------------------------ TMA warp
    if warp == TMA_WARP:
        for tile in cutlass.range(bidx, m_tiles, grid, unroll=1):
            # (BM, BK, RestK) and (BN, BK, RestK): this tile's K tiles of A and B
            gA = cute.local_tile(mA, (BM, BN, BK), (tile, 0, None), proj=(1, None, 1))
            gB = cute.local_tile(mB, (BM, BN, BK), (tile, 0, None), proj=(None, 1, 1))
            tAsA, tAgA = cpasync.tma_partition(
                tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                cute.group_modes(thr_mma.partition_A(gA), 0, 3),
            )  # fmt: skip
            tBsB, tBgB = cpasync.tma_partition(
                tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
                cute.group_modes(thr_mma.partition_B(gB), 0, 3),
            )  # fmt: skip
            for kt in cutlass.range(k_tiles, unroll=1):
                entry = ab_producer.acquire_and_advance()
                cute.copy(
                    tma_a, tAgA[(None, kt)], tAsA[(None, entry.index)], tma_bar_ptr=entry.barrier
                )
                cute.copy(
                    tma_b, tBgB[(None, kt)], tBsB[(None, entry.index)], tma_bar_ptr=entry.barrier
                )
        ab_producer.tail()

    # ------------------------------------------------------------------ MMA warp
    if warp == MMA_WARP:
        tmem.wait_for_alloc()
        acc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_fake.layout)
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, SLOTS)
        hold = min(HOLD, k_tiles)  # both are known at compile time
        for _tile in cutlass.range(bidx, m_tiles, grid, unroll=1):
            tiled_mma, ab_consumer, acc_state = mma_tile(
                tiled_mma, ab_consumer, acc_pipeline, acc_state, acc, tCrA, tCrB, k_tiles, hold
            )
        acc_pipeline.producer_tail(acc_state)

    # ------------------------------------------------------------------ epilogue warps
    if warp < MMA_WARP:
        tmem.allocate(512)
        tmem.wait_for_alloc()
        tmem_ptr = tmem.retrieve_ptr(cutlass.Float32)
        # (BM, BN) in TMEM, cut into (BM, EPI_N) steps
        tAcc = transform_partitioned_tensor_layout(cute.make_tensor(tmem_ptr, acc_fake.layout))
        tAcc_epi = cute.flat_divide(tAcc, (BM, EPI_N))
        load_op = sm100_utils.get_tmem_load_op(
            (BM, BN, BK),
            LayoutEnum.ROW_MAJOR,
            cutlass.BFloat16,
            cutlass.Float32,
            (BM, EPI_N),
            False,
        )
        t2r = tcgen05.make_tmem_copy(load_op, tAcc_epi[(None, None, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        # (T2R, T2R_M, T2R_N, STEP): this thread's part of each step (one row, EPI_N columns)
        tTR_tAcc = thr_t2r.partition_S(tAcc_epi)
        tTR_tAcc = cute.group_modes(tTR_tAcc, 3, cute.rank(tTR_tAcc))
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, SLOTS)
        for tile in cutlass.range(bidx, m_tiles, grid, unroll=1):
            gC = cute.local_tile(mC, (BM, BN), (tile, 0))
            tGC = transform_partitioned_tensor_layout(thr_mma.partition_C(gC))
            tTR_gC = thr_t2r.partition_D(cute.flat_divide(tGC, (BM, EPI_N)))
            tTR_gC = cute.group_modes(tTR_gC, 3, cute.rank(tTR_gC))
            # the same partition of the output's (row, column) coordinates: rows at or past m
            # (the last tile of a row count that is not a multiple of BM) are not stored
            cC = cute.local_tile(cute.make_identity_tensor(mC.shape), (BM, BN), (tile, 0))
            tGcC = transform_partitioned_tensor_layout(thr_mma.partition_C(cC))
            tTR_cC = thr_t2r.partition_D(cute.flat_divide(tGcC, (BM, EPI_N)))
            tTR_cC = cute.group_modes(tTR_cC, 3, cute.rank(tTR_cC))
            rAcc = cute.make_rmem_tensor(tTR_gC[(None, None, None, 0)].shape, cutlass.Float32)
            rC = cute.make_rmem_tensor(rAcc.shape, cutlass.BFloat16)
            epi = TileDrain(t2r, tTR_tAcc, tTR_gC, tTR_cC, rAcc, rC, cute.size(mC, mode=[0]))
            acc_state = drain_tile(acc_pipeline, acc_state, epi)
        pipeline.NamedBarrier(barrier_id=1, num_threads=32 * len(EPI_WARPS)).arrive_and_wait()
        tmem.relinquish_alloc_permit()
        tmem.free(tmem_ptr)


@cute.jit
def launch(
    a: cute.Pointer,
    b: cute.Pointer,
    c: cute.Pointer,
    m: cutlass.Int32,
    k: cutlass.Constexpr,
    stream: cuda.CUstream,
    mma_tile: cutlass.Constexpr,
    drain_tile: cutlass.Constexpr,
):
    """Build the tensors, the tiled MMA, the ring's layouts and TMA atoms, and launch
    :func:`gemm` on ``CTAS`` persistent CTAs of 192 threads with the learner's two functions."""
    assert k % BK == 0 and k >= BK, "k must be a positive multiple of BK (no K tail)"
    mA = cute.make_tensor(a, cute.make_layout((m, k), stride=(k, 1)))
    mB = cute.make_tensor(b, cute.make_layout((BN, k), stride=(k, 1)))
    mC = cute.make_tensor(c, cute.make_layout((m, BN), stride=(BN, 1)))
    K_MAJOR = cute.nvgpu.OperandMajorMode.K
    tiled_mma = sm100_utils.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, K_MAJOR, K_MAJOR, cutlass.Float32,
        tcgen05.CtaGroup.ONE, (BM, ATOM_N),
    )  # fmt: skip
    a_layout = sm100_utils.make_smem_layout_a(tiled_mma, (BM, BN, BK), cutlass.BFloat16, RING)
    b_layout = sm100_utils.make_smem_layout_b(tiled_mma, (BM, BN, BK), cutlass.BFloat16, RING)
    a_one = cute.slice_(a_layout, (None, None, None, 0))
    b_one = cute.slice_(b_layout, (None, None, None, 0))
    op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_a, mA_tma = cute.nvgpu.make_tiled_tma_atom_A(op, mA, a_one, (BM, BN, BK), tiled_mma)
    tma_b, mB_tma = cute.nvgpu.make_tiled_tma_atom_B(op, mB, b_one, (BM, BN, BK), tiled_mma)
    tx_bytes = cute.size_in_bytes(cutlass.BFloat16, a_one) + cute.size_in_bytes(
        cutlass.BFloat16, b_one
    )
    gemm(
        tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mC, a_layout, b_layout, tx_bytes,
        mma_tile, drain_tile,
    ).launch(grid=(CTAS, 1, 1), block=[192, 1, 1], stream=stream)  # fmt: skip


def example_args():
    """What ``cute.compile(host, ...)`` gets on a CPU: placeholder pointers for A, B and C, m =
    4096 rows, k = 6144 (GLM 5.3's hidden size), the default stream."""
    return placeholder_ptr(), placeholder_ptr(), placeholder_ptr(), 4096, 6144, cuda.CUstream(0)

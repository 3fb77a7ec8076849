"""Stage 3 (sm_100a): persistent, warp-specialized grouped GEMM; 1-CTA or 2-CTA (``cta_group::2``).

What changes from stage 2:

1. **Persistent CTAs.** The grid is one CTA (or one CTA pair) per SM; each walks the ragged list
   of output tiles over (expert, m tile, n tile) with the shared
   :mod:`pearl_moe.kernels.scheduler` (offsets read on the device). Empty
   experts and the unused m tiles of stage 2's grid cost nothing any more.
2. **The roles run ahead of each other across tiles.** The TMA warp starts the next tile's loads
   while the MMA warp still works on this one (the A/B ring never drains between tiles), and the
   accumulator gets ``acc_buffers`` TMEM buffers, so the MMA warp fills one while the epilogue
   warps drain the other::

       TMA warp  --A/B ring (ring_depth)-->  MMA warp  --TMEM acc (acc_buffers)-->  epilogue warps
            ^---------- empty ----------'      ^----------- empty -------------'

3. **2-CTA mode** (``cta_group=2``, a cluster of 2): one ``tcgen05.mma.cta_group::2`` issued by
   the even CTA computes a ``tile_m x tile_n`` tile; each CTA holds ``tile_m / 2`` rows of A and of
   the accumulator and loads half of B, so per-CTA SMEM for B halves.

Budget, tile 128 x 256 x 64, 1-CTA, acc_buffers 2 (two 128 x 256 fp32 accumulators)::

    A ring    r x 128 x 64 x 2 B = 16 KB / entry      TMEM  2 x 256 = 512 columns (all of it)
    B ring    r x 256 x 64 x 2 B = 32 KB / entry      4 entries: 192 KB + 24 KB epilogue + 160 B
    barriers  (2 x 4 + 2 x 2) x 8 B + 64 B = 160 B    total 221,344 B of 232,448 (5 would not fit)
Tile 256 x 256 x 64, 2-CTA: each CTA holds A 128 x 64 (16 KB) and half of B (128 x 64, 16 KB) per
ring entry, exactly the 1-CTA 128 x 128 ring, while one MMA covers four times the output. Tile
128 x n, 2-CTA (64 rows per CTA): the epilogue tiles its warps 2 x 2
(:meth:`~.common.KernelBase._epilogue_tile`), each warp in its own TMEM quarter.

The work on one tile is the shared pieces of :mod:`.common` (``load_k_tiles``, ``mma_k_loop``,
``epilogue_tile``, with ``allocate_smem``, ``tma_partition_ab``, ``mma_fragments``,
``epilogue_begin``/``_end``); what this module adds is the loops around them.

Stages 4-7 are this same kernel with options switched on by the config (``stage`` only gates which
options a config may use, :func:`pearl_moe.kernels.ladder.stage_problems`); each option's device
code is a small method in its own module, called here under ``cutlass.const_expr``:

* ``epilogue="direct_store"`` (stage 4): :mod:`.direct_store` (``store_tile_direct``);
* ``tile_m=64``, 1-CTA (stage 5): :mod:`.row_tiles_64` (the 16-lane TMEM load);
* ``b_k_tiles=2`` (stage 6): :mod:`.wide_b` (``load_k_tiles_wide_b``, ``mma_k_loop_wide_b``);
* ``acc_slots=2`` (stage 7): :mod:`.split_accumulator` (``mma_tile_split``).

Compile-verified only: no B200 has ever run this kernel.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from ...config import GemmConfig
from ...hardware import B200
from .. import scheduler
from .direct_store import DirectStoreEpilogue
from .split_accumulator import SplitAccumulator
from .stage2_grouped import (
    GroupedGemmKernel,
    expert_descriptor_ptr,
    fake_arguments,
    workspace_for,
    workspace_gmem_ptr,
)
from .wide_b import WideBEntries

__all__ = [
    "PersistentGroupedGemmKernel",
    "build",
    "compile_fake",
    "compile_kernel",
    "fake_arguments",
    "launch",
]


class PersistentGroupedGemmKernel(
    DirectStoreEpilogue, WideBEntries, SplitAccumulator, GroupedGemmKernel
):
    """Stage 3 (and, with options, 4-7): the persistent grouped GEMM. Same arguments as stage 2
    (pointers, run-time rows, compile-time ``n``, ``k``, ``experts``).

    Grid: ``sms`` CTAs (``sms / 2`` clusters of 2 in 2-CTA mode), 192 threads each; ``sms`` is the
    persistent grid :func:`pearl_moe.kernels.targets.persistent_ctas` gives (in 2-CTA mode, twice the
    clusters the driver says fit at once, so the static schedule never waits for a second wave
    of clusters on a GPU with fewer usable SM pairs than ``sms // 2``). ``stage``
    (3-7) is the course stage the config is checked against.
    """

    stage = 3

    def __init__(self, config: GemmConfig, sms: int = B200.sms, stage: int = 3):
        self.stage = stage
        super().__init__(config)
        self.sms = sms
        self.num_clusters = sms // self.config.cta_group

    def acc_buffer(self, acc_state):
        """The TMEM accumulator buffer of an accumulator-pipeline position: with ``acc_slots=2``
        (stage 7) two consecutive positions are the two slots of one buffer."""
        if cutlass.const_expr(self.config.acc_slots == 1):
            return acc_state.index
        return acc_state.index // self.config.acc_slots

    # ------------------------------------------------------------------ host entry point
    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        offs_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        workspace_ptr: cute.Pointer,
        rows: cutlass.Int32,
        n: cutlass.Constexpr,
        k: cutlass.Constexpr,
        experts: cutlass.Constexpr,
        stream: cuda.CUstream,
    ):
        # views, atoms and the per-expert C descriptors exactly as in stage 2
        tiled_mma, tma, _, _, mOffs, mWorkspace = self._grouped_prologue(
            a_ptr, w_ptr, offs_ptr, c_ptr, workspace_ptr, rows, n, k, experts, stream
        )
        self.persistent_kernel(
            tiled_mma,
            *tma,
            mOffs,
            mWorkspace,
            self.cluster_layout_vmnk,
            self.a_smem_layout,
            self.b_smem_layout,
            self.c_smem_layout,
        ).launch(
            grid=(self.num_clusters * self.config.cta_group, 1, 1),
            block=[self.threads_per_cta, 1, 1],
            cluster=(self.config.cta_group, 1, 1),
            stream=stream,
            use_pdl=self.config.pdl,
        )

    @cute.kernel
    def persistent_kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_atom_c: cute.CopyAtom | None,
        mC_mn: cute.Tensor,
        mOffs: cute.Tensor,
        mWorkspace: cute.Tensor,
        cluster_layout_vmnk: cute.Layout,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        c_smem_layout: cute.ComposedLayout | None,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        # Position in the CTA pair (always 0 in 1-CTA mode); the even CTA issues the MMAs.
        pair_rank = bidx % self.config.cta_group
        is_leader = pair_rank == 0
        cluster_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_vmnk = cluster_layout_vmnk.get_flat_coord(cluster_rank)
        cluster_idx = bidx // self.config.cta_group

        if warp_idx == self.tma_warp:
            cpasync.prefetch_descriptor(tma_atom_a)
            cpasync.prefetch_descriptor(tma_atom_b)

        sA, sB, sC, storage = self.allocate_smem(a_smem_layout, b_smem_layout, c_smem_layout)
        ab_producer, ab_consumer, acc_pipeline, tmem = self.make_pipelines(
            storage, cluster_layout_vmnk, defer_sync=True
        )
        b_producer, b_consumer = None, None
        if cutlass.const_expr(self.wide_b):
            b_producer, b_consumer = self._make_b_pipeline(storage, cluster_layout_vmnk)
        # every CTA of the cluster has initialized its barriers before anyone signals them
        pipeline_init_arrive(cluster_shape_mn=cluster_layout_vmnk, is_relaxed=True)

        # TMA multicast masks: in 2-CTA mode the loads signal the leader CTA's barriers
        a_mcast_mask = None
        b_mcast_mask = None
        if cutlass.const_expr(self.use_2cta):
            a_mcast_mask = cpasync.create_tma_multicast_mask(
                cluster_layout_vmnk, cluster_coord_vmnk, mcast_mode=2
            )
            b_mcast_mask = cpasync.create_tma_multicast_mask(
                cluster_layout_vmnk, cluster_coord_vmnk, mcast_mode=1
            )

        thr_mma = tiled_mma.get_slice(pair_rank)
        # (MMA, MMA_M, MMA_K, STAGE), (MMA, MMA_N, MMA_K, B_STAGE), (MMA, MMA_M, MMA_N, ACC_STAGE)
        tCrA, tCrB, tCtAcc_fake = self.mma_fragments(tiled_mma, sA, sB)
        k_tile_cnt = cute.ceil_div(cute.size(mA_mk, mode=[1]), self.mma_tiler_mnk[2])
        experts = cute.size(mB_nkl, mode=[2])
        n_tiles = cute.ceil_div(cute.size(mB_nkl, mode=[0]), self.mma_tiler_mnk[1])
        tile_m = self.mma_tiler_mnk[0]
        # The ragged tile list, with the expert offsets clamped into [0, rows] (see scheduler).
        sched = scheduler.TileScheduler(
            mOffs,
            cute.size(mA_mk, mode=[0]),
            experts,
            tile_m,
            n_tiles,
            self.num_clusters,
            self.config.walk,
        )

        pipeline_init_wait(cluster_shape_mn=cluster_layout_vmnk)
        if cutlass.const_expr(self.config.pdl):
            # a programmatic dependent launch: the setup above may overlap the previous kernel;
            # nothing it wrote is read before it completes (GemmConfig.pdl)
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        # ---------------------------------------------------------------- TMA producer warp
        if warp_idx == self.tma_warp:
            tile, expert, first = sched.first_tile(cluster_idx)
            while expert < experts:
                m_tile, n_tile, row0, _valid = sched.decode(tile, expert, first)
                # (bM, bK, RestK): A rows from the tile's first row of this expert
                gA = cute.local_tile(
                    cute.domain_offset((row0, 0), mA_mk),
                    self.mma_tiler_mnk,
                    (0, n_tile, None),
                    proj=(1, None, 1),
                )
                # (bN, bK x b_k_tiles, RestK / b_k_tiles): this expert's weights, in B entries
                gB = cute.local_tile(
                    mB_nkl[(None, None, expert)],
                    self.b_tiler_mnk,
                    (0, n_tile, None),
                    proj=(None, 1, 1),
                )
                # (MMA, MMA_M, MMA_K, RestK): this CTA's half in 2-CTA mode
                tCgA = thr_mma.partition_A(gA)
                # (MMA, MMA_N, MMA_K, RestK)
                tCgB = thr_mma.partition_B(gB)
                # ((ATOM_V, REST_V), STAGE) x 2 and ((ATOM_V, REST_V), RestK) x 2
                tAsA, tAgA, tBsB, tBgB = self.tma_partition_ab(
                    tma_atom_a,
                    sA,
                    tCgA,
                    tma_atom_b,
                    sB,
                    tCgB,
                    cluster_layout_vmnk,
                    cluster_coord_vmnk,
                )
                if cutlass.const_expr(self.wide_b):
                    ab_producer, b_producer = self.load_k_tiles_wide_b(
                        tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB, ab_producer, b_producer,
                        k_tile_cnt, a_mcast_mask, b_mcast_mask,
                    )  # fmt: skip
                else:
                    ab_producer = self.load_k_tiles(
                        tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB, ab_producer, k_tile_cnt,
                        a_mcast_mask, b_mcast_mask,
                    )  # fmt: skip
                tile, expert, first = sched.next_tile(tile, expert, first)
            ab_producer.tail()
            if cutlass.const_expr(self.wide_b):
                b_producer.tail()

        # ---------------------------------------------------------------- MMA warp
        if warp_idx == self.mma_warp:
            tmem.wait_for_alloc()
            # (MMA, MMA_M, MMA_N, ACC_STAGE)
            tCtAcc = cute.make_tensor(tmem.retrieve_ptr(self.acc_dtype), tCtAcc_fake.layout)
            acc_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Producer, self.num_acc_stages
            )
            if is_leader:
                tile, expert, first = sched.first_tile(cluster_idx)
                while expert < experts:
                    if cutlass.const_expr(self.config.acc_slots == 2):
                        # stage 7: two slots of one buffer, acquired and committed inside
                        tiled_mma, ab_consumer, acc_state = self.mma_tile_split(
                            tiled_mma, tCtAcc[(None, None, None, self.acc_buffer(acc_state))],
                            tCrA, tCrB, ab_consumer, acc_pipeline, acc_state, k_tile_cnt,
                        )  # fmt: skip
                    else:
                        # wait until the epilogue has drained this accumulator buffer
                        acc_pipeline.producer_acquire(acc_state)
                        # (MMA, MMA_M, MMA_N): the accumulator buffer of this tile
                        tCtAcc_tile = tCtAcc[(None, None, None, acc_state.index)]
                        if cutlass.const_expr(self.wide_b):
                            tiled_mma, ab_consumer, b_consumer = self.mma_k_loop_wide_b(
                                tiled_mma, tCtAcc_tile, tCrA, tCrB, ab_consumer, b_consumer,
                                k_tile_cnt,
                            )  # fmt: skip
                        else:
                            tiled_mma, ab_consumer = self.mma_k_loop(
                                tiled_mma, tCtAcc_tile, tCrA, tCrB, ab_consumer, k_tile_cnt
                            )
                        acc_pipeline.producer_commit(acc_state)
                        acc_state.advance()
                    tile, expert, first = sched.next_tile(tile, expert, first)
                acc_pipeline.producer_tail(acc_state)

        # ---------------------------------------------------------------- epilogue warps
        if warp_idx < self.mma_warp:
            # (MMA, MMA_M, MMA_N, ACC_STAGE)
            tmem_ptr, tCtAcc, c_pipeline = self.epilogue_begin(tmem, tCtAcc_fake)
            acc_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_acc_stages
            )
            subtiles = cute.size(self.mma_tiler_mnk[1]) // self.epi_tile_mn[1]
            stored = cutlass.Int32(0)
            tile, expert, first = sched.first_tile(cluster_idx)
            while expert < experts:
                m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
                if cutlass.const_expr(not self.direct_store):
                    # (bM, bN): coordinates relative to the expert's own C descriptor
                    gC = cute.local_tile(
                        mC_mn, self.mma_tiler_mnk, (m_tile, n_tile, None), proj=(1, 1, None)
                    )
                    # (MMA, MMA_M, MMA_N): this CTA's rows of the tile
                    tCgC = thr_mma.partition_C(gC)
                    desc_ptr = expert_descriptor_ptr(mWorkspace, expert)
                    if warp_idx == self.epilogue_warps[0]:
                        cpasync.fence_tma_desc_acquire(desc_ptr)
                    acc_pipeline.consumer_wait(acc_state)
                    self.epilogue_tile(
                        tidx,
                        warp_idx,
                        tma_atom_c,
                        tCtAcc[(None, None, None, acc_state.index)],
                        sC,
                        tCgC,
                        c_pipeline,
                        stored,
                        desc_ptr,
                    )
                    # the accumulator is in registers/SMEM now: hand the buffer back to the MMA warp
                    cute.arch.fence_view_async_tmem_load()
                    with cute.arch.elect_one():
                        acc_pipeline.consumer_release(acc_state)
                    acc_state.advance()
                    stored = stored + subtiles
                else:
                    # stage 4: registers -> global, rows guarded at the expert's end
                    acc_state = self.store_tile_direct(
                        tidx,
                        thr_mma,
                        tCtAcc[(None, None, None, self.acc_buffer(acc_state))],
                        self.output_tile(mC_mn, row0, n_tile),
                        valid,
                        cute.size(mC_mn, mode=[1]) - n_tile * self.out_tile_n,
                        acc_pipeline,
                        acc_state,
                    )
                tile, expert, first = sched.next_tile(tile, expert, first)
            self.epilogue_end(tmem, tmem_ptr, c_pipeline)


# ---------------------------------------------------------------------- module interface
def build(config: GemmConfig, sms: int = B200.sms, stage: int = 3) -> PersistentGroupedGemmKernel:
    """The persistent kernel object (``sms`` persistent CTAs; B200 has 148), its config checked
    against course stage ``stage`` (3-7: which options it may use)."""
    return PersistentGroupedGemmKernel(config, sms, stage)


def compile_kernel(
    config: GemmConfig, n: int, k: int, experts: int, sms: int | None = None, stage: int = 3
):
    """Compile for fixed ``(n, k, experts)`` and grid size ``sms`` (B200: 148). No GPU needed.

    The compiled function takes ``(a_ptr, w_ptr, offsets_ptr, out_ptr, workspace_ptr, rows,
    stream)``, as stage 2's (:func:`~.stage2_grouped.compile_kernel`); with direct stores the
    workspace is passed but not read.
    """
    kernel = build(config, sms or B200.sms, stage)
    return cute.compile(kernel, *fake_arguments(kernel, n, k, experts))


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int, stage: int = 3):
    """Compile for the current ``CUTE_DSL_ARCH``, no GPU needed (CPU inspection).

    The same compile as :func:`compile_kernel` for a B200's 148 SMs; ``m`` is a run-time value.
    """
    del m
    return compile_kernel(config, n, k, experts, stage=stage)


def launch(
    compiled, A, W, end_offsets, out, host_offsets, stream, *, out_align=16, get_workspace=None
):
    """Descriptor kernel (TMA-store epilogue) + one persistent launch; the scheduler reads the
    offsets on the device.

    Mirrors :func:`pearl_moe.kernels.sm90.stage3_persistent.launch`, plus the workspace pointer
    (:func:`~.stage2_grouped.workspace_for`, shared with stage 2; ``get_workspace`` replaces it).
    ``out_align``: the alignment in bytes the output must have. The requirement depends on the
    configuration (``GemmConfig.output_alignment``: 32 for 256-bit direct stores, else 16), which a
    compiled kernel loaded from the disk cache does not carry, so
    :func:`pearl_moe.kernels.api.grouped_gemm` checks it before calling here; this check is the
    last guard. Not run yet: no B200 here (the compile is verified on a CPU,
    ``tests/test_sm100_interface.py``).
    """
    from ..host import bf16_ptr, i32_ptr

    del host_offsets
    if out.data_ptr() % out_align:
        raise ValueError(
            f"out's data pointer must be {out_align}-byte aligned for this stage's "
            f"{8 * out_align}-bit stores"
        )
    workspace = (get_workspace or workspace_for)(A.device, stream, W.shape[0])
    compiled(
        bf16_ptr(A),
        bf16_ptr(W),
        i32_ptr(end_offsets),
        bf16_ptr(out),
        workspace_gmem_ptr(workspace),
        A.shape[0],
        stream,
    )

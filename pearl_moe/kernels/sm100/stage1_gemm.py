"""Stage 1 (sm_100a): one bf16 GEMM, ``C = A @ B^T``, one output tile per CTA.

This is the smallest complete Blackwell GEMM the course builds on. One CTA computes one
``tile_m x tile_n`` tile of C with three kinds of warps::

    TMA producer warp --(A/B ring, `ring_depth` entries, full/empty mbarriers)--> MMA warp
    MMA warp          --(accumulator in TMEM, full/empty mbarriers)------> epilogue warps
    epilogue warps    --(TMEM -> registers -> SMEM buffer, `epi_buffers` deep)--> TMA store

* The TMA warp streams K tiles of A (``tile_m x tile_k``) and B (``tile_n x tile_k``) into a ring
  of shared-memory entries; each entry's "full" barrier counts the bytes the TMA will deliver.
* One thread of the MMA warp issues ``tcgen05.mma`` (UMMA): operands come straight from shared
  memory, the fp32 accumulator lives in tensor memory (TMEM), not in registers.
* Four epilogue warps (one per 32-lane quarter of TMEM) read the accumulator with
  ``tcgen05.ld`` in ``epi_tile_n``-column slices, convert to bf16, write the slice into a
  shared-memory buffer and let one thread TMA-store it.

Budget (tile 128 x 128 x 64, bf16, a ring of 6 entries), the arithmetic :mod:`pearl_moe.config` does::

    A ring    6 x 128 x 64 x 2 B             =  96 KB
    B ring    6 x 128 x 64 x 2 B             =  96 KB
    epilogue  3 x 128 x 32 x 2 B             =  24 KB
    barriers  (2 x 6 + 2 x 1) x 8 B + 64 B   = 176 B   (mbarriers + TMEM address / padding)
    total                                    ~ 216.2 KB of 227 KB
    TMEM      128 fp32 columns (one 128 x 128 accumulator, allocation rounded to a power of 2)

The pieces every stage shares (SMEM layouts, TMA atoms, pipelines, the K loop, the epilogue)
live in :mod:`.common` (:class:`~.common.KernelBase`). This module adds the stage-1 kernel:
``kernel`` picks the CTA's tile from the grid and hands it to :meth:`DenseGemmKernel.tile_roles` (the
three roles for one tile), built from ``allocate_smem``, ``tma_partition_ab``, ``mma_fragments``,
``load_k_tiles``, ``mma_k_loop``, ``epilogue_begin``, ``epilogue_tile`` and ``epilogue_end``.
Stage 2 only changes where the tile comes from (and calls ``tile_roles`` unchanged); stage 3 calls
the same pieces from its persistent tile loops.

Compile-verified only: no B200 has ever run this kernel (``tests/test_compile_sm100.py``).
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import LayoutEnum

from ...config import GemmConfig
from ..host import launch_per_expert, placeholder_ptr
from .common import KernelBase

__all__ = [
    "DenseGemmKernel",
    "build",
    "compile_fake",
    "compile_kernel",
    "fake_arguments",
    "launch",
    "placeholder_ptr",
]


class DenseGemmKernel(KernelBase):
    """Stage 1: ``C (m, n) = A (m, k) @ B (n, k)^T`` in bf16 with an fp32 TMEM accumulator.

    A and B are K-major (rows of ``k`` contiguous elements, as ``nn.Linear`` stores weights), C is
    row-major. Grid: ``(ceil(m / tile_m), ceil(n / tile_n), 1)``, 192 threads per CTA.
    """

    stage = 1

    # ------------------------------------------------------------------ host entry point
    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Constexpr,
        k: cutlass.Constexpr,
        stream: cuda.CUstream,
    ):
        """Launch on ``A (m, k)``, ``B (n, k)``, ``C (m, n)``; ``m`` is a run-time value."""
        # (m, k), (n, k), (m, n): K-major operands, row-major output
        mA = cute.make_tensor(a_ptr, cute.make_layout((m, k), stride=(k, 1)))
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, k), stride=(k, 1)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((m, n), stride=(n, 1)))
        tiled_mma = self._setup(mA.element_type, mC.element_type, LayoutEnum.from_tensor(mC))
        tma_atom_a, tma_a, tma_atom_b, tma_b = self._make_tma_atoms(tiled_mma, mA, mB)
        tma_atom_c, tma_c = self._make_tma_store_atom(mC)
        grid = cute.ceil_div(mC.shape, self.mma_tiler_mnk[:2])
        self.kernel(
            tiled_mma,
            tma_atom_a,
            tma_a,
            tma_atom_b,
            tma_b,
            tma_atom_c,
            tma_c,
            self.a_smem_layout,
            self.b_smem_layout,
            self.c_smem_layout,
        ).launch(
            grid=(grid[0], grid[1], 1),
            block=[self.threads_per_cta, 1, 1],
            stream=stream,
        )

    # ------------------------------------------------------------------ device kernel
    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nk: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC_mn: cute.Tensor,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        c_smem_layout: cute.ComposedLayout,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()

        if warp_idx == self.tma_warp:
            cpasync.prefetch_descriptor(tma_atom_a)
            cpasync.prefetch_descriptor(tma_atom_b)
            cpasync.prefetch_descriptor(tma_atom_c)

        sA, sB, sC, storage = self.allocate_smem(a_smem_layout, b_smem_layout, c_smem_layout)
        ab_producer, ab_consumer, acc_pipeline, tmem = self.make_pipelines(storage)

        # (bM, bK, RestK), (bN, bK, RestK), (bM, bN): this CTA's tile, stage 1 takes it from the grid
        gA = cute.local_tile(mA_mk, self.mma_tiler_mnk, (bidx, bidy, None), proj=(1, None, 1))
        gB = cute.local_tile(mB_nk, self.mma_tiler_mnk, (bidx, bidy, None), proj=(None, 1, 1))
        gC = cute.local_tile(mC_mn, self.mma_tiler_mnk, (bidx, bidy, None), proj=(1, 1, None))
        self.tile_roles(
            tidx, warp_idx, tiled_mma, tma_atom_a, gA, sA, tma_atom_b, gB, sB, tma_atom_c, gC, sC,
            ab_producer, ab_consumer, acc_pipeline, tmem, None,
        )  # fmt: skip

    @cute.jit
    def tile_roles(
        self,
        tidx,
        warp_idx,
        tiled_mma: cute.TiledMma,
        tma_atom_a: cute.CopyAtom,
        gA: cute.Tensor,
        sA: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        gB: cute.Tensor,
        sB: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        gC: cute.Tensor,
        sC: cute.Tensor,
        ab_producer,
        ab_consumer,
        acc_pipeline,
        tmem,
        tma_desc_ptr,
    ):
        """One output tile, three roles: load its K tiles, accumulate them, store the accumulator.

        ``gA`` (bM, bK, RestK), ``gB`` (bN, bK, RestK) and ``gC`` (bM, bN) are the tile's global
        views; where they come from is the caller's business (stage 1: the grid; stage 2: the grid
        and the expert's offsets). ``tma_desc_ptr`` (or None) points the store at a per-expert C
        descriptor written by the previous kernel.
        """
        k_tile_cnt = cute.size(gA, mode=[2])
        thr_mma = tiled_mma.get_slice(0)
        # (MMA, MMA_M, MMA_K, RestK)
        tCgA = thr_mma.partition_A(gA)
        # (MMA, MMA_N, MMA_K, RestK)
        tCgB = thr_mma.partition_B(gB)
        # (MMA, MMA_M, MMA_N)
        tCgC = thr_mma.partition_C(gC)
        # ((ATOM_V, REST_V), STAGE) x 2 and ((ATOM_V, REST_V), RestK) x 2
        tAsA, tAgA, tBsB, tBgB = self.tma_partition_ab(tma_atom_a, sA, tCgA, tma_atom_b, sB, tCgB)
        # (MMA, MMA_M, MMA_K, STAGE), (MMA, MMA_N, MMA_K, STAGE), (MMA, MMA_M, MMA_N, ACC_STAGE)
        tCrA, tCrB, tCtAcc_fake = self.mma_fragments(tiled_mma, sA, sB)

        # ---------------------------------------------------------------- TMA producer warp
        if warp_idx == self.tma_warp:
            ab_producer = self.load_k_tiles(
                tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB, ab_producer, k_tile_cnt
            )
            ab_producer.tail()

        # ---------------------------------------------------------------- MMA warp
        if warp_idx == self.mma_warp:
            tmem.wait_for_alloc()
            # (MMA, MMA_M, MMA_N, ACC_STAGE)
            tCtAcc = cute.make_tensor(tmem.retrieve_ptr(self.acc_dtype), tCtAcc_fake.layout)
            acc_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Producer, self.num_acc_buffers
            )
            acc_pipeline.producer_acquire(acc_state)
            tiled_mma, ab_consumer = self.mma_k_loop(
                tiled_mma,
                tCtAcc[(None, None, None, acc_state.index)],
                tCrA,
                tCrB,
                ab_consumer,
                k_tile_cnt,
            )
            acc_pipeline.producer_commit(acc_state)

        # ---------------------------------------------------------------- epilogue warps
        if warp_idx < self.mma_warp:
            # (MMA, MMA_M, MMA_N, ACC_STAGE)
            tmem_ptr, tCtAcc, c_pipeline = self.epilogue_begin(tmem, tCtAcc_fake)
            if cutlass.const_expr(tma_desc_ptr is not None):
                if warp_idx == self.epilogue_warps[0]:
                    # the descriptor was written by the generic proxy (previous kernel)
                    cpasync.fence_tma_desc_acquire(tma_desc_ptr)
            acc_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_acc_buffers
            )
            acc_pipeline.consumer_wait(acc_state)
            self.epilogue_tile(
                tidx,
                warp_idx,
                tma_atom_c,
                tCtAcc[(None, None, None, acc_state.index)],
                sC,
                tCgC,
                c_pipeline,
                cutlass.Int32(0),
                tma_desc_ptr,
            )
            with cute.arch.elect_one():
                acc_pipeline.consumer_release(acc_state)
            self.epilogue_end(tmem, tmem_ptr, c_pipeline)


# ---------------------------------------------------------------------- module interface
def build(config: GemmConfig) -> DenseGemmKernel:
    """The stage-1 kernel object for ``config`` (validated; ``stages`` resolved)."""
    return DenseGemmKernel(config)


def fake_arguments(kernel: DenseGemmKernel, n: int, k: int):
    """``cute.compile`` arguments after the kernel: placeholder pointers, ``m``, ``n``, ``k``, stream.

    ``m`` (here 1) stays a run-time ``Int32``; ``n`` and ``k`` are compile-time constants.
    """
    del kernel
    return placeholder_ptr(), placeholder_ptr(), placeholder_ptr(), 1, n, k, cuda.CUstream(0)


def compile_kernel(config: GemmConfig, n: int, k: int, experts: int = 1, sms: int | None = None):
    """Compile for fixed ``(n, k)``; rows stay a run-time argument. Works without a GPU.

    The compiled function takes ``(a_ptr, w_ptr, out_ptr, rows, stream)``: one expert's GEMM.
    """
    del experts, sms  # one expert per launch; one tile per CTA, not persistent
    kernel = build(config)  # one accumulator (KernelBase pins it for stages 1 and 2)
    return cute.compile(kernel, *fake_arguments(kernel, n, k))


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int = 1):
    """Compile stage 1 for the current ``CUTE_DSL_ARCH``, no GPU needed (CPU inspection).

    The same compile as :func:`compile_kernel`: ``m`` is a run-time value, so it is not used.
    """
    del m
    return compile_kernel(config, n, k, experts)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream):
    """The naive MoE loop: one launch per non-empty expert, rows sliced on the host.

    Mirrors :func:`pearl_moe.kernels.sm90.stage1_gemm.launch`. Not run yet: no B200 here (the
    compile is verified on a CPU, ``tests/test_sm100_interface.py``).
    """
    del end_offsets  # the loop needs the offsets on the host
    launch_per_expert(compiled, A, W, out, host_offsets, stream)

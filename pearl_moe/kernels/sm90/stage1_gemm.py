"""Stage 1 (sm_90a): one dense GEMM per launch, ``C = A @ W_e^T`` for a single expert.

What this stage teaches
-----------------------
The three moving parts every later stage keeps:

1. **TMA loads into a ring of shared-memory entries.** One thread issues a bulk tensor copy of an
   A tile (tile_m x tile_k) and a B tile (tile_n x tile_k) per ring entry; an mbarrier with a byte
   count ("full") says when it landed, a second one ("empty") says when the math is done with it.
2. **wgmma (HGMMA).** Each 64-row warpgroup multiplies its rows of A by the whole B tile straight
   from shared memory into fp32 registers; ``tile_k / 16`` instructions per k tile.
3. **An SMEM-staged TMA-store epilogue.** Registers -> bf16 -> swizzled shared memory (stmatrix)
   -> one TMA store per ``tile_m x epi_tile_n`` slice.

Budget (tile 128 x 128 x 64, bf16, H200's 232,448 B per block)::

    one ring entry  = A 128 x 64 x 2 B + B 128 x 64 x 2 B = 32 KB
    epilogue        = 3 x 128 x 32 x 2 B                 = 24 KB
    barriers        = 2 x ring_depth x 8 B + 64 B
    6 ring entries  = 6 x 32 KB + 24 KB + 160 B = 216.2 KB   (7 would need 248 KB: too many)

There is no warp specialization here: all threads are consumers and warp 0 also refills the
ring right after the math releases an entry. Used once per expert from Python
(:func:`launch`), this is the naive MoE loop, written in our own kernel.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ...config import GemmConfig
from ..host import launch_per_expert, placeholder_ptr
from .common import KernelBase

__all__ = ["DenseGemmKernel", "build", "compile_kernel", "compile_fake", "launch"]


class DenseGemmKernel(KernelBase):
    """``C (m, n) = A (m, k) @ B (n, k)^T`` for one expert; ``n`` and ``k`` fixed at compile time."""

    def __init__(self, config: GemmConfig):
        super().__init__(config)
        self.threads_per_cta = self.num_mma_threads
        self.epilogue_barrier_id = 1
        self.load_warp = 0

    # ------------------------------------------------------------------ host side
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
        self._setup()
        mA = cute.make_tensor(a_ptr, cute.make_layout((m, k), stride=(k, 1)))
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, k), stride=(k, 1)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((m, n), stride=(n, 1)))
        tma_atom_a, tma_a = self._tma_load_atom(mA, self.a_smem_layout, (self.tile_m, self.tile_k))
        tma_atom_b, tma_b = self._tma_load_atom(mB, self.b_smem_layout, (self.tile_n, self.tile_k))
        tma_atom_c, tma_c = self._tma_store_atom(mC)
        grid = ((m + self.tile_m - 1) // self.tile_m, (n + self.tile_n - 1) // self.tile_n, 1)
        self.kernel(
            tma_atom_a,
            tma_a,
            tma_atom_b,
            tma_b,
            tma_atom_c,
            tma_c,
            self.tiled_mma,
            self.a_smem_layout,
            self.b_smem_layout,
            self.epi_smem_layout,
        ).launch(grid=grid, block=[self.threads_per_cta, 1, 1], stream=stream)

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nk: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC_mn: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        epi_smem_layout: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        m_tile, n_tile, _ = cute.arch.block_idx()
        if warp_idx == self.load_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        sA, sB, sC, barriers = self.allocate_smem(a_smem_layout, b_smem_layout, epi_smem_layout)
        ab_pipeline = self.make_ab_pipeline(
            barriers, self.threads_per_cta // 32, a_smem_layout, b_smem_layout
        )

        # (tile_m, tile_k, k_tiles)
        gA = cute.local_tile(mA_mk, (self.tile_m, self.tile_k), (m_tile, None))
        # (tile_n, tile_k, k_tiles)
        gB = cute.local_tile(mB_nk, (self.tile_n, self.tile_k), (n_tile, None))
        # (tile_m, tile_n)
        gC = cute.local_tile(mC_mn, (self.tile_m, self.tile_n), (m_tile, n_tile))
        self.tile_roles(
            tidx, warp_idx, ab_pipeline, tma_atom_a, gA, tma_atom_b, gB, tma_atom_c, gC,
            tiled_mma, sA, sB, sC,
        )  # fmt: skip

    @cute.jit
    def tile_roles(
        self, tidx, warp_idx, ab_pipeline, tma_atom_a, gA, tma_atom_b, gB, tma_atom_c, gC,
        tiled_mma, sA, sB, sC,
    ):  # fmt: skip
        """Mainloop + epilogue of one output tile (stage 2 calls this too)."""
        # (TMA, ring_depth), (TMA, k_tiles)
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_atom_a,
            0,
            cute.make_layout(1),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2),
        )
        # (TMA, ring_depth), (TMA, k_tiles)
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_atom_b,
            0,
            cute.make_layout(1),
            cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2),
        )
        warpgroup = cute.arch.make_warp_uniform(tidx // 128)
        thr_mma = tiled_mma.get_slice(warpgroup * 128)
        # (MMA, MMA_M, MMA_K, ring_depth)
        tCsA = thr_mma.partition_A(sA)
        # (MMA, MMA_N, MMA_K, ring_depth)
        tCsB = thr_mma.partition_B(sB)
        # (MMA, MMA_M, MMA_K, ring_depth): wgmma descriptors of the A ring
        tCrA = tiled_mma.make_fragment_A(tCsA)
        # (MMA, MMA_N, MMA_K, ring_depth): wgmma descriptors of the B ring
        tCrB = tiled_mma.make_fragment_B(tCsB)
        # (MMA, MMA_M, MMA_N)
        tCgC = thr_mma.partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape, self.acc_dtype)

        k_tiles = cute.size(gA, mode=[2])

        # ============ TMA producer (warp 0): fill the ring ahead of the math ============
        load_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.ring_depth
        )
        if warp_idx == self.load_warp:
            for _ in cutlass.range(cutlass.min(self.ring_depth, k_tiles), unroll=1):
                self._issue_loads(
                    ab_pipeline, load_state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB
                )
                load_state.advance()

        # ============ MMA consumer (all warpgroups) ============
        read_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ring_depth
        )
        release_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ring_depth
        )
        acc.fill(0.0)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        for kt in cutlass.range(k_tiles, unroll=1):
            ab_pipeline.consumer_wait(read_state)
            self.mma_k_tile(tiled_mma, acc, tCrA, tCrB, read_state.index)
            read_state.advance()
            # Keep one k tile of wgmma in flight; the previous one is done, so release its entry.
            cute.nvgpu.warpgroup.wait_group(1)
            if kt > 0:
                ab_pipeline.consumer_release(release_state)
                release_state.advance()
                # Refill the entry k tile kt-1 just freed. (Refilling before this release would
                # deadlock: warp 0 would wait for an entry it only frees one iteration later.)
                if warp_idx == self.load_warp and load_state.count < k_tiles:
                    self._issue_loads(
                        ab_pipeline, load_state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB
                    )
                    load_state.advance()
        cute.nvgpu.warpgroup.wait_group(0)
        ab_pipeline.consumer_release(release_state)

        # ============ Epilogue: registers -> SMEM -> TMA store ============
        store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_buffers,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.threads_per_cta),
        )
        epi_barrier = pipeline.NamedBarrier(
            barrier_id=self.epilogue_barrier_id, num_threads=self.threads_per_cta
        )
        self.epilogue_tile(
            tiled_mma, acc, sC, tma_atom_c, gC, tidx, store_pipeline, epi_barrier,
            warp_idx == self.load_warp, 0,
        )  # fmt: skip
        if warp_idx == self.load_warp:
            store_pipeline.producer_tail()


# ---------------------------------------------------------------------------- host launcher
def build(config: GemmConfig) -> DenseGemmKernel:
    """The stage-1 kernel object for ``config`` (pure Python; nothing compiled yet)."""
    return DenseGemmKernel(config)


def compile_kernel(config: GemmConfig, n: int, k: int, experts: int, sms: int | None = None):
    """Compile for fixed ``(n, k)``; rows stay a run-time argument. Works without a GPU."""
    del experts, sms  # one expert per launch; not persistent
    kernel = build(config)
    stream = cuda.CUstream(0)
    ptr = placeholder_ptr
    return cute.compile(kernel, ptr(), ptr(), ptr(), 1, n, k, stream)


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int):
    """Compile with placeholder pointers (CPU inspection: PTX / CUBIN / SASS in .artifacts)."""
    del m
    return compile_kernel(config, n, k, experts)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream):
    """The naive MoE loop: one launch per non-empty expert, rows sliced on the host."""
    del end_offsets  # the loop needs the offsets on the host
    launch_per_expert(compiled, A, W, out, host_offsets, stream)

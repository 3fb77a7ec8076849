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

* Stage count and tile shape are the knobs ("bytes in flight"): with tile 128 x 128 x 64 every ring
  entry holds 32 KB, so ``stages`` entries keep ``stages x 32 KB`` of loads in flight per SM; at
  decode, where each expert has a handful of rows, that is what hides HBM latency. Up to 6 entries
  fit next to the 24 KB epilogue buffer (see :mod:`pearl_moe.budget`).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ...config import GemmConfig
from .. import scheduler
from ..host import placeholder_ptr
from .common import WARPGROUP_THREADS
from .stage2_grouped import Sm90GroupedGemm

__all__ = ["Sm90PersistentGroupedGemm", "build", "compile_kernel", "compile_fake", "launch"]


class Sm90PersistentGroupedGemm(Sm90GroupedGemm):
    """Stage 2's math and epilogue inside a persistent, warp-specialized loop."""

    def __init__(self, config: GemmConfig, sms: int = 132):
        super().__init__(config)
        self.sms = sms
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
        tma_atom_a, tma_a = self._tma_load_atom(mA, self.a_smem_layout, (self.tile_m, self.tile_k))
        tma_atom_b, tma_b = self._tma_load_atom(mW, self.b_smem_layout, (self.tile_n, self.tile_k))
        tma_atom_c, tma_c3 = self._tma_store_atom(mC3)
        self.experts = experts
        self.n_tiles = (n + self.tile_n - 1) // self.tile_n
        self.k_tiles = (k + self.tile_k - 1) // self.tile_k
        self.kernel(
            tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c3, mOffs,
            self.tiled_mma, self.a_smem_layout, self.b_smem_layout, self.epi_smem_layout,
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
        mOffs: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        epi_smem_layout: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS)
        cta, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        if warp_idx == self.load_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        sA, sB, sC, barriers = self._allocate_smem(a_smem_layout, b_smem_layout, epi_smem_layout)
        ab_pipeline = self._make_ab_pipeline(
            barriers, self.num_mma_threads // 32, a_smem_layout, b_smem_layout
        )
        # The ragged tile list, with the expert offsets clamped into [0, rows] (see scheduler).
        sched = scheduler.TileScheduler(
            mOffs, cute.size(mA_mk, mode=[0]), self.experts, self.tile_m, self.n_tiles, ctas
        )

        # ============ TMA producer warpgroup ============
        if warpgroup < self.producer_warpgroups:
            cute.arch.setmaxregister_decrease(self.producer_registers)
            if warp_idx == self.load_warp:
                load_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.ring_depth
                )
                tile, expert, first = sched.first_tile(cta)
                while expert < self.experts:
                    m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
                    # (tile_m, tile_k, k_tiles)
                    gA = cute.local_tile(
                        cute.domain_offset((row0, 0), mA_mk), (self.tile_m, self.tile_k), (0, None)
                    )
                    # (tile_n, tile_k, k_tiles)
                    gB = cute.local_tile(
                        mW_nke[(None, None, expert)], (self.tile_n, self.tile_k), (n_tile, None)
                    )
                    # (TMA, stages), (TMA, k_tiles)
                    tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                        tma_atom_a, 0, cute.make_layout(1),
                        cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2),
                    )  # fmt: skip
                    # (TMA, stages), (TMA, k_tiles)
                    tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                        tma_atom_b, 0, cute.make_layout(1),
                        cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
                    )  # fmt: skip
                    load_state.reset_count()
                    for _ in cutlass.range(self.k_tiles, unroll=1):
                        self._issue_loads(
                            ab_pipeline, load_state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB
                        )
                        load_state.advance()
                    tile, expert, first = sched.next_tile(tile, expert, first)
                ab_pipeline.producer_tail(load_state)

        # ============ MMA consumer + epilogue warpgroups ============
        if warpgroup >= self.producer_warpgroups:
            cute.arch.setmaxregister_increase(self.consumer_registers)
            mma_tidx = tidx - self.producer_warpgroups * WARPGROUP_THREADS
            thr_mma = tiled_mma.get_slice(
                (warpgroup - self.producer_warpgroups) * WARPGROUP_THREADS
            )
            # (MMA, MMA_M, MMA_K, stages)
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
            # (MMA, MMA_N, MMA_K, stages)
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            # (MMA, MMA_M, MMA_N)
            acc = cute.make_rmem_tensor(
                thr_mma.partition_shape_C((self.tile_m, self.tile_n)), self.acc_dtype
            )
            store_pipeline = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_buffers,
                producer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.num_mma_threads
                ),
            )
            epi_barrier = pipeline.NamedBarrier(
                barrier_id=self.epilogue_barrier_id, num_threads=self.num_mma_threads
            )
            slices = self.tile_n // self.epi_tile[1]
            read_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.ring_depth
            )
            release_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.ring_depth
            )
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            tiles_done = cutlass.Int32(0)
            tile, expert, first = sched.first_tile(cta)
            while expert < self.experts:
                m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
                acc.fill(0.0)
                for kt in cutlass.range(self.k_tiles, unroll=1):
                    ab_pipeline.consumer_wait(read_state)
                    self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, read_state.index)
                    read_state.advance()
                    cute.nvgpu.warpgroup.wait_group(1)
                    if kt > 0:
                        ab_pipeline.consumer_release(release_state)
                        release_state.advance()
                cute.nvgpu.warpgroup.wait_group(0)
                ab_pipeline.consumer_release(release_state)
                release_state.advance()

                # (tile_m, tile_n): rows past the expert's end fall outside the clipped view
                gC = cute.local_tile(
                    cute.domain_offset((self.tile_m - valid, 0), mC3[(None, None, row0 + valid)]),
                    (self.tile_m, self.tile_n),
                    (0, n_tile),
                )
                self._epilogue(
                    tiled_mma, acc, sC, tma_atom_c, gC, mma_tidx, store_pipeline, epi_barrier,
                    warp_idx == self.store_warp, tiles_done * slices,
                )  # fmt: skip
                tiles_done = tiles_done + 1
                tile, expert, first = sched.next_tile(tile, expert, first)
            if warp_idx == self.store_warp:
                store_pipeline.producer_tail()


# ---------------------------------------------------------------------------- host launcher
def build(config: GemmConfig, sms: int = 132) -> Sm90PersistentGroupedGemm:
    return Sm90PersistentGroupedGemm(config, sms)


def compile_kernel(config: GemmConfig, n: int, k: int, experts: int, sms: int | None = None):
    """Compile for fixed ``(n, k, experts)`` and grid size ``sms`` (H200: 132). No GPU needed."""
    bf16 = cutlass.BFloat16
    return cute.compile(
        build(config, sms or 132), placeholder_ptr(bf16, 16), placeholder_ptr(bf16, 16), placeholder_ptr(cutlass.Int32, 4),
        placeholder_ptr(bf16, 16), 1, n, k, experts, cuda.CUstream(0),
    )  # fmt: skip


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int):
    """Compile with placeholder pointers (CPU inspection: PTX / CUBIN / SASS in .artifacts)."""
    del m
    return compile_kernel(config, n, k, experts)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream):
    """One persistent launch; the scheduler reads the offsets on the device."""
    from ..host import bf16_ptr, i32_ptr

    del host_offsets
    compiled(bf16_ptr(A), bf16_ptr(W), i32_ptr(end_offsets), bf16_ptr(out), A.shape[0], stream)

"""Stage 2 (sm_90a): the whole grouped GEMM in one launch.

What changed since stage 1
--------------------------
Only *which* tile a CTA computes and *where* its rows live. The mainloop and epilogue are stage 1's
(:meth:`DenseGemmKernel.tile_roles`, unchanged).

* Grid (x, y, z) = (m tile, n tile, expert), with ``cdiv(rows, tile_m)`` m tiles: no expert has more
  rows than that, and the host needs no offsets (no device-to-host copy, graph-capturable).
* Each CTA reads its expert's ``[start, end)`` from the offsets on the device; a CTA whose m tile
  starts past ``end`` has nothing to do and exits after initialising its barriers.
* A loads start at row ``start + m_tile * tile_m`` (not a multiple of tile_m: ``domain_offset``
  moves the TMA coordinates). Rows past the expert's end that the box drags in belong to the next
  expert (or are zero-filled past the last row); they only feed accumulator rows never stored.
* W is viewed as ``(n, k, experts)``; the expert picks the third TMA coordinate.
* The store uses the clipped three-dimensional output view described in :mod:`.common`, so the
  last tile of an expert writes exactly its ``valid`` rows and nothing of the next expert.

Why it is faster than stage 1's Python loop: one launch instead of one per expert (launch gaps of
a few microseconds each, E = 32 to 112 experts at decode), and all experts' tiles share the GPU at
once instead of one small GEMM (often a single m tile, e.g. 16 rows x 4096 / 128 = 32 CTAs on 132
SMs) at a time. What it still wastes: with skewed routing most (m tile, expert) CTAs are empty, and
each CTA pays the prologue (barrier init, first loads) and the epilogue drain without overlap.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from ...config import GemmConfig
from .. import scheduler
from ..host import placeholder_ptr
from .stage1_gemm import DenseGemmKernel

__all__ = ["GroupedGemmKernel", "build", "compile_kernel", "compile_fake", "launch"]


class GroupedGemmKernel(DenseGemmKernel):
    """``out[rows_e] = A[rows_e] @ W[e]^T`` for all experts ``e`` in one launch."""

    max_stage = 2

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
        mA, mW, mOffs, mC3 = self.grouped_tensors(
            a_ptr, w_ptr, offs_ptr, c_ptr, rows, n, k, experts
        )
        tma_atom_a, tma_a = self._tma_load_atom(mA, self.a_smem_layout, (self.tile_m, self.tile_k))
        tma_atom_b, tma_b = self._tma_load_atom(mW, self.b_smem_layout, (self.tile_n, self.tile_k))
        tma_atom_c, tma_c3 = self._tma_store_atom(mC3)
        grid = (
            cutlass.max((rows + self.tile_m - 1) // self.tile_m, 1),
            (n + self.tile_n - 1) // self.tile_n,
            experts,
        )
        self.kernel(
            tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c3, mOffs,
            self.tiled_mma, self.a_smem_layout, self.b_smem_layout, self.epi_smem_layout,
        ).launch(grid=grid, block=[self.threads_per_cta, 1, 1], stream=stream)  # fmt: skip

    def grouped_tensors(self, a_ptr, w_ptr, offs_ptr, c_ptr, rows, n, k, experts):
        """Global views: A (rows, k), W (n, k, experts), offsets (experts,), clipped out view.
        ``out`` has ``n`` columns, or ``n / 2`` with a fused gated activation."""
        mA = cute.make_tensor(a_ptr, cute.make_layout((rows, k), stride=(k, 1)))
        mW = cute.make_tensor(w_ptr, cute.make_layout((n, k, experts), stride=(k, 1, n * k)))
        mOffs = cute.make_tensor(offs_ptr, cute.make_layout(experts))
        n_out = self.config.output_columns(n)
        # out3[i, j, e] = out[e - tile_m + i, j]: base tile_m rows before out (see common.py).
        mC3 = cute.make_tensor(
            c_ptr + (-self.tile_m * n_out),
            cute.make_layout((self.tile_m, n_out, rows + 1), stride=(n_out, 1, n_out)),
        )
        return mA, mW, mOffs, mC3

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
        m_tile, n_tile, expert = cute.arch.block_idx()
        if warp_idx == self.load_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        sA, sB, sC, barriers = self.allocate_smem(a_smem_layout, b_smem_layout, epi_smem_layout)
        ab_pipeline = self.make_ab_pipeline(
            barriers, self.threads_per_cta // 32, a_smem_layout, b_smem_layout
        )

        # [start, end) clamped into [0, rows]: wrong offsets cannot move a tile outside A or out
        start, end = scheduler.expert_rows(mOffs, expert, cute.size(mA_mk, mode=[0]))
        row0 = start + m_tile * self.tile_m
        if row0 < end:
            valid = cutlass.min(end - row0, self.tile_m)
            # (tile_m, tile_k, k_tiles): rows row0 .. row0 + tile_m of A
            gA = cute.local_tile(
                cute.domain_offset((row0, 0), mA_mk), (self.tile_m, self.tile_k), (0, None)
            )
            # (tile_n, tile_k, k_tiles): expert's weights, n tile n_tile
            gB = cute.local_tile(
                mW_nke[(None, None, expert)], (self.tile_n, self.tile_k), (n_tile, None)
            )
            # (tile_m, tile_n): box rows >= valid fall outside the clipped view
            gC = cute.local_tile(
                cute.domain_offset((self.tile_m - valid, 0), mC3[(None, None, row0 + valid)]),
                (self.tile_m, self.tile_n),
                (0, n_tile),
            )
            self.tile_roles(
                tidx, warp_idx, ab_pipeline, tma_atom_a, gA, tma_atom_b, gB, tma_atom_c, gC,
                tiled_mma, sA, sB, sC,
            )  # fmt: skip


# ---------------------------------------------------------------------------- host launcher
def build(config: GemmConfig) -> GroupedGemmKernel:
    return GroupedGemmKernel(config)


def compile_kernel(config: GemmConfig, n: int, k: int, experts: int, sms: int | None = None):
    """Compile for fixed ``(n, k, experts)``; rows stay a run-time argument. Works without a GPU."""
    del sms
    bf16 = cutlass.BFloat16
    return cute.compile(
        build(config), placeholder_ptr(bf16, 16), placeholder_ptr(bf16, 16), placeholder_ptr(cutlass.Int32, 4), placeholder_ptr(bf16, 16),
        1, n, k, experts, cuda.CUstream(0),
    )  # fmt: skip


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int):
    """Compile with placeholder pointers (CPU inspection: PTX / CUBIN / SASS in .artifacts)."""
    del m
    return compile_kernel(config, n, k, experts)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream):
    """One launch; the offsets are read on the device (``host_offsets`` is not needed)."""
    from ..host import bf16_ptr, i32_ptr

    del host_offsets
    compiled(bf16_ptr(A), bf16_ptr(W), i32_ptr(end_offsets), bf16_ptr(out), A.shape[0], stream)

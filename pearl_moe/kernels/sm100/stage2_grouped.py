"""Stage 2 (sm_100a): every expert in one launch; CTA ``(x, y, z)`` computes tile ``(x, y)`` of expert ``z``.

What changes from stage 1 (same SMEM; the roles are stage 1's ``tile_roles``, called unchanged):

1. **The grid gains a z axis, one slice per expert.** ``x`` runs over the m tiles of the *largest*
   possible expert (``ceil(total_rows / tile_m)``, known on the host without reading the offsets),
   so a CTA first reads its expert's ``[start, end)`` from the offsets on the device and leaves at
   once if ``x * tile_m >= end - start``. No device-to-host copy: the launch can be graph-captured.
2. **A is read through a per-expert window.** The A coordinates start at the expert's first row
   (``domain_offset``); rows past the expert's end are loaded (they belong to the next expert) but
   only feed accumulator rows that are never stored.
3. **B is the expert's slice** of the ``(E, n, k)`` weights: a third TMA coordinate.
4. **The store must not spill into the next expert.** A TMA store clips a box only at the bounds of
   its descriptor, and the descriptor built on the host spans all rows. So a small kernel launched
   just before the GEMM (one warp per expert) copies that host-encoded descriptor into a global
   workspace (``E x 128 B``) and patches the copy's base row and row count to the expert's own
   (``tensormap.replace``, :mod:`pearl_moe.kernels.sm100.tma_descriptors`); the epilogue stores through
   ``tma_desc_ptr`` = that expert's descriptor. Stream order makes the descriptors visible to the
   GEMM. Rows past an expert's end are clipped by the TMA unit, never written. The workspace is
   allocated by :func:`launch` (:func:`workspace_for`, once per device, stream and expert count)
   and passed as one more pointer after ``out``.

Budget: identical to stage 1 (the workspace lives in global memory)::

    tile 128 x 128 x 64, 6 stages: 96 KB A + 96 KB B + 24 KB epilogue + 176 B barriers
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import LayoutEnum

from ...config import GemmConfig
from .. import scheduler
from ..host import placeholder_ptr
from .stage1_gemm import DenseGemmKernel
from .tma_descriptors import (
    TMA_DESCRIPTOR_BYTES,
    descriptor_ptr,
    expert_output_view,
    workspace_bytes,
    workspace_for,
    workspace_gmem_ptr,
    write_expert_descriptor,
)

__all__ = [
    "GroupedGemmKernel",
    "TMA_DESCRIPTOR_BYTES",
    "build",
    "expert_descriptor_ptr",
    "write_expert_descriptor",
    "compile_fake",
    "compile_kernel",
    "fake_arguments",
    "launch",
    "workspace_bytes",
    "workspace_for",
    "workspace_gmem_ptr",
]


@cute.jit
def expert_descriptor_ptr(mWorkspace: cute.Tensor, expert, space=cute.AddressSpace.generic):
    """Pointer to ``expert``'s 128-byte C descriptor in the workspace (one slot per expert)."""
    return descriptor_ptr(mWorkspace, expert, space)


@cute.jit
def expert_rows(mOffs: cute.Tensor, expert, total_rows):
    """``(start, rows)`` of ``expert`` from ``E`` cumulative end offsets (torch grouped_mm),
    clamped into ``[0, total_rows]`` (:func:`pearl_moe.kernels.scheduler.expert_rows`)."""
    start, end = scheduler.expert_rows(mOffs, expert, total_rows)
    return start, end - start


class GroupedGemmKernel(DenseGemmKernel):
    """Stage 2: ``C[rows_e] = A[rows_e] @ W[e]^T`` for every expert ``e``, one launch.

    Arguments: pointers to ``A (M, k)``, ``W (E, n, k)``, ``offs (E,)`` int32 end offsets,
    ``C (M, n)`` and the ``workspace`` (``E * 16`` int64 words, see :func:`workspace_bytes`), the
    run-time row count ``M``, the compile-time ``n``, ``k``, ``E`` and the stream. Grid
    ``(ceil(M / tile_m), ceil(n / tile_n), E)``, 192 threads per CTA.
    """

    stage = 2

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
        # 1) views, atoms, and one warp per expert writing that expert's C descriptor
        tiled_mma, tma, mA, mC, mOffs, mWorkspace = self._grouped_prologue(
            a_ptr, w_ptr, offs_ptr, c_ptr, workspace_ptr, rows, n, k, experts, stream
        )
        # 2) the grouped GEMM
        m_tiles = cute.ceil_div(cute.size(mA, mode=[0]), self.mma_tiler_mnk[0])
        n_tiles = cute.ceil_div(cute.size(mC, mode=[1]), self.mma_tiler_mnk[1])
        self.grouped_kernel(
            tiled_mma,
            *tma,
            mOffs,
            mWorkspace,
            self.a_smem_layout,
            self.b_smem_layout,
            self.c_smem_layout,
        ).launch(
            grid=(m_tiles, n_tiles, experts),
            block=[self.threads_per_cta, 1, 1],
            stream=stream,
        )

    def _grouped_prologue(
        self, a_ptr, w_ptr, offs_ptr, c_ptr, workspace_ptr, rows, n, k, experts, stream
    ):
        """Host side shared by stages 2-7: the global views, the MMA and TMA atoms, and the
        pre-kernel (one warp per expert) that writes each expert's clipped C descriptor (not
        with direct stores, which get ``(None, mC)`` in place of the C atom and TMA tensor).

        Returns ``(tiled_mma, (tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c), mA, mC,
        mOffs, mWorkspace)``.
        """
        # (rows, k), (n, k, E), (rows, n), (E,), (E * 16,)
        mA, mB_nkl, mC, mOffs, mWorkspace = self.grouped_tensors(
            a_ptr, w_ptr, offs_ptr, c_ptr, workspace_ptr, rows, n, k, experts
        )
        tiled_mma = self._setup(mA.element_type, mC.element_type, LayoutEnum.from_tensor(mC))
        tma_atom_a, tma_a, tma_atom_b, tma_b = self._make_tma_atoms(tiled_mma, mA, mB_nkl)
        # Direct stores (stage 4 on) guard rows themselves: no C TMA atom, no descriptors, and the
        # epilogue gets the output tensor itself.
        tma_atom_c, tma_c = None, mC
        if cutlass.const_expr(not self.direct_store):
            tma_atom_c, tma_c = self._make_tma_store_atom(mC)
            self.write_descriptors(tma_atom_c, mC, mOffs, mWorkspace).launch(
                grid=(experts, 1, 1), block=[32, 1, 1], stream=stream
            )
        tma = (tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c)
        return tiled_mma, tma, mA, mC, mOffs, mWorkspace

    def grouped_tensors(self, a_ptr, w_ptr, offs_ptr, c_ptr, workspace_ptr, rows, n, k, experts):
        """Global views of the pointers; ``rows`` is run-time, ``n``, ``k``, ``experts`` static."""
        # (rows, k): all experts' rows, K-major
        mA = cute.make_tensor(a_ptr, cute.make_layout((rows, k), stride=(k, 1)))
        # (n, k, E): the (E, n, k) weights with the expert as the TMA's third coordinate
        mB_nkl = cute.make_tensor(w_ptr, cute.make_layout((n, k, experts), stride=(k, 1, n * k)))
        # (rows, n_out): row-major output (n_out = n / 2 with a fused activation)
        n_out = self.config.output_columns(n)
        mC = cute.make_tensor(c_ptr, cute.make_layout((rows, n_out), stride=(n_out, 1)))
        # (E,): int32 end offsets
        mOffs = cute.make_tensor(offs_ptr, cute.make_layout(experts))
        # (E * 16,): int64 words, one 128-byte C descriptor per expert
        mWorkspace = cute.make_tensor(
            workspace_ptr, cute.make_layout(experts * (TMA_DESCRIPTOR_BYTES // 8))
        )
        return mA, mB_nkl, mC, mOffs, mWorkspace

    @cute.kernel
    def write_descriptors(self, tma_atom_c: cute.CopyAtom, mC: cute.Tensor, mOffs: cute.Tensor,
                          mWorkspace: cute.Tensor):  # fmt: skip
        expert, _, _ = cute.arch.block_idx()
        start, rows = expert_rows(mOffs, expert, cute.size(mC, mode=[0]))
        # the host's descriptor of all rows, patched to (rows_e, n) from the expert's first row
        write_expert_descriptor(tma_atom_c, mWorkspace, expert, expert_output_view(mC, start, rows))

    @cute.kernel
    def grouped_kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC_mn: cute.Tensor,
        mOffs: cute.Tensor,
        mWorkspace: cute.Tensor,
        a_smem_layout: cute.ComposedLayout,
        b_smem_layout: cute.ComposedLayout,
        c_smem_layout: cute.ComposedLayout,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        m_tile, n_tile, expert = cute.arch.block_idx()

        # Shared memory and barriers are set up by every CTA (the allocator is kernel-wide);
        # only CTAs whose tile holds rows of their expert do any work.
        if warp_idx == self.tma_warp:
            cpasync.prefetch_descriptor(tma_atom_a)
            cpasync.prefetch_descriptor(tma_atom_b)

        sA, sB, sC, storage = self.allocate_smem(a_smem_layout, b_smem_layout, c_smem_layout)
        ab_producer, ab_consumer, acc_pipeline, tmem = self.make_pipelines(storage)

        # The expert's rows come from the offsets, on the device.
        start, rows = expert_rows(mOffs, expert, cute.size(mA_mk, mode=[0]))
        if m_tile * self.mma_tiler_mnk[0] < rows:
            # (M_e, k): A's coordinates shifted to the expert's first row
            mA_e = cute.domain_offset((start, 0), mA_mk)
            # (n, k): this expert's weights
            mB_e = mB_nkl[(None, None, expert)]
            tile = (m_tile, n_tile, None)
            # (bM, bK, RestK)
            gA = cute.local_tile(mA_e, self.mma_tiler_mnk, tile, proj=(1, None, 1))
            # (bN, bK, RestK)
            gB = cute.local_tile(mB_e, self.mma_tiler_mnk, tile, proj=(None, 1, 1))
            # (bM, bN): coordinates relative to the expert's own C descriptor
            gC = cute.local_tile(mC_mn, self.mma_tiler_mnk, tile, proj=(1, 1, None))
            # the store goes through the expert's own C descriptor
            desc_ptr = expert_descriptor_ptr(mWorkspace, expert)
            self.tile_roles(
                tidx, warp_idx, tiled_mma, tma_atom_a, gA, sA, tma_atom_b, gB, sB, tma_atom_c, gC,
                sC, ab_producer, ab_consumer, acc_pipeline, tmem, desc_ptr,
            )  # fmt: skip


# ---------------------------------------------------------------------- module interface
def build(config: GemmConfig) -> GroupedGemmKernel:
    """The stage-2 kernel object for ``config`` (validated; ``stages`` resolved)."""
    return GroupedGemmKernel(config)


def fake_arguments(kernel, n: int, k: int, experts: int):
    """``cute.compile`` arguments after the kernel: placeholder pointers for A, W, offsets, C and
    the workspace, then ``rows`` (run-time ``Int32``, traced as 1), ``n``, ``k``, ``experts``
    (compile-time constants) and the stream. One compiled kernel serves every batch size."""
    del kernel
    return (
        placeholder_ptr(),
        placeholder_ptr(),
        placeholder_ptr(cutlass.Int32, 4),
        placeholder_ptr(),
        placeholder_ptr(cutlass.Int64, TMA_DESCRIPTOR_BYTES),
        1,
        n,
        k,
        experts,
        cuda.CUstream(0),
    )


def compile_kernel(config: GemmConfig, n: int, k: int, experts: int, sms: int | None = None):
    """Compile for fixed ``(n, k, experts)``; rows stay a run-time argument. Works without a GPU.

    The compiled function takes ``(a_ptr, w_ptr, offsets_ptr, out_ptr, workspace_ptr, rows,
    stream)``: the grouped interface of :mod:`pearl_moe.kernels` plus the descriptor workspace
    (:func:`workspace_for`), which :func:`launch` supplies.
    """
    del sms  # one CTA per (m tile, n tile, expert), not persistent
    kernel = build(config)  # one accumulator (KernelBase pins it for stages 1 and 2)
    return cute.compile(kernel, *fake_arguments(kernel, n, k, experts))


def compile_fake(config: GemmConfig, m: int, n: int, k: int, experts: int):
    """Compile stage 2 for the current ``CUTE_DSL_ARCH``, no GPU needed (CPU inspection).

    The same compile as :func:`compile_kernel`: ``m`` is a run-time value, so it is not used.
    """
    del m
    return compile_kernel(config, n, k, experts)


def launch(compiled, A, W, end_offsets, out, host_offsets, stream):
    """One stream-ordered pair of launches (descriptor kernel, grouped GEMM); the offsets are read
    on the device, ``host_offsets`` is not needed.

    Mirrors :func:`pearl_moe.kernels.sm90.stage2_grouped.launch`, plus the workspace pointer. Not
    run yet: no B200 here (the compile is verified on a CPU, ``tests/test_sm100_interface.py``).
    """
    from ..host import bf16_ptr, i32_ptr

    del host_offsets
    ws = workspace_for(A.device, stream, W.shape[0])
    compiled(
        bf16_ptr(A),
        bf16_ptr(W),
        i32_ptr(end_offsets),
        bf16_ptr(out),
        workspace_gmem_ptr(ws),
        A.shape[0],
        stream,
    )

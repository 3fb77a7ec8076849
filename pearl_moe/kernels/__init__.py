"""Grouped-GEMM kernels: the public call, shared host setup, the tile scheduler, per-arch stages.

``grouped_gemm(A, W, offsets, config=None, out=None, stage=None, check=True, host_offsets=None,
activation=None)``
validates its inputs and the configuration (``api.validate``, ``api.can_implement``: every problem
is a ``ValueError`` before anything is compiled or launched), picks the architecture of A's GPU
(sm_90 -> ``pearl_moe.kernels.sm90``, sm_100 -> ``pearl_moe.kernels.sm100``) and launches the
requested stage, compiling once per (arch, stage, config, n, k, experts, SM count); compiled
kernels are kept on disk (``compile_cache``), so a new process loads them instead. With neither
``stage`` nor ``config``, the stage and configuration are the tuned choice for the GPU and shape
(``autotune.pick``: a measured table per GPU, an H100 borrowing the H200's, else a heuristic);
``stage=N`` alone runs the course's stage N with its own configuration.

Kernel-module interface (both architectures)
--------------------------------------------
Each architecture has three kernel modules, ``pearl_moe.kernels.<sm90|sm100>.stage1_gemm``,
``stage2_grouped`` and ``stage3_persistent``; stages 4-7 run the persistent kernel with more options
(the table is :data:`pearl_moe.kernels.ladder.KERNEL_STAGES`). :func:`api.stage_module` returns a
stage's :class:`api.StageKernel`: its module, reached through the explicit
``api.KERNEL_FAMILIES`` mapping (imported on first use), with the stage bound. A kernel module
exposes (the persistent one takes a trailing ``stage`` argument, 3-7, that says what options a
configuration may use):

``build(config[, sms]) -> kernel``
    The kernel object (pure-Python config in ``__init__``, host ``@cute.jit __call__``, device
    ``@cute.kernel``). Nothing is compiled.
``compile_kernel(config, n, k, experts, sms) -> compiled``
    ``cute.compile`` with placeholder pointers (``cute.runtime.make_ptr(..., 0, gmem,
    assumed_align=16)``), so it runs with or without a GPU. Run-time arguments of the compiled
    function: ``(a_ptr, w_ptr, offsets_ptr, out_ptr, rows: Int32, stream)`` for grouped stages,
    and for the sm_90a persistent kernel (stages 3-7) ``(a_ptr, w_ptr, offsets_ptr, out_ptr,
    index_ptr, rows, stream)``: ``index_ptr`` is the row index of ``gather_a`` (A's rows read
    through it) and unused otherwise; stage 1 (one dense GEMM) takes ``(a_ptr, w_ptr, out_ptr,
    rows, stream)``. The sm_100a grouped
    stages take one more pointer after ``out_ptr``: a workspace of E x 128 B where a pre-kernel
    writes each expert's clipped C TMA descriptor (``launch`` allocates and keeps it). ``n``, ``k``,
    ``experts`` are compile-time constants; ``sms`` sizes a persistent grid (H200 132, B200 148).
``compile_fake(config, m, n, k, experts) -> compiled``
    The same for CPU inspection (``compiled.artifacts.PTX / CUBIN / SASS``; set ``CUTE_DSL_ARCH``
    and ``CUTE_DSL_KEEP=ptx,cubin,sass`` before importing cutlass).
``launch(compiled, A, W, end_offsets, out, host_offsets, stream[, a_index]) -> None``
    Launch on ``stream`` (a ``CUstream``). ``end_offsets``: E int32 end offsets on the device;
    ``host_offsets``: the same as a Python list when the caller checked them, else None (only
    stage 1's per-expert loop needs them; the API always provides them for stage 1).
    ``a_index`` (sm_90a persistent kernel with ``gather_a`` only): row ``r`` of the problem is
    row ``a_index[r]`` of ``A``.

Pointers come from :func:`pearl_moe.kernels.host.bf16_ptr` / ``i32_ptr``.
"""

from .gated_layout import deinterleave_gate_up, interleave_gate_up

#: The public call loads on first use: a kernel module imported alone (a compile worker, the
#: course's source excerpts) brings no dispatch, tuning or compile-cache code with it.
_LAZY = {"grouped_gemm": "api", "validate": "api"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["grouped_gemm", "validate", "interleave_gate_up", "deinterleave_gate_up"]

"""Blackwell (sm_100a) kernels of the course: three kernels and the options of the last one.

* ``common``            the pieces every stage shares (:class:`~.common.KernelBase`: SMEM layouts,
                        TMA atoms, pipelines, K loop, TMA-store epilogue) and the config checks
* ``stage1_gemm``       one GEMM, one tile per CTA: TMA ring -> tcgen05 UMMA (TMEM) -> TMA store
* ``stage2_grouped``    one launch for all experts: CTA (x, y, z) = tile (x, y) of expert z
* ``stage3_persistent`` persistent, warp-specialized grouped GEMM, 1-CTA or 2-CTA (cta_group::2);
  stages 4-7 are this kernel with one more option each, switched on by the config
  (:data:`pearl_moe.kernels.ladder.KERNEL_STAGES`); each option's device code lives in a module
  named for it: ``direct_store`` (TMEM -> registers -> 256-bit global stores), ``row_tiles_64``
  (reading a 64-row accumulator), ``wide_b`` (B ring entries of two K tiles),
  ``split_accumulator`` (two independently released accumulator slots)
* ``tma_descriptors``   the per-expert C TMA descriptors the grouped stages patch on the device

Each kernel module follows the kernel-module interface of :mod:`pearl_moe.kernels`: ``build(config)``,
``compile_kernel(config, n, k, experts, sms)``, ``compile_fake(config, m, n, k, experts)`` and
``launch(compiled, A, W, end_offsets, out, host_offsets, stream)``. The kernels take pointers, the
run-time row count and compile-time ``n``, ``k``, ``experts``, as the sm_90a ones do. One
difference: the grouped stages (2-7) also take a ``workspace_ptr`` right after ``out_ptr``, the
per-expert C TMA descriptors (``E x 128 B``) that a small pre-kernel writes on the device for the
TMA-store epilogue: the host's descriptor of the whole output, copied and patched to the expert's
rows (:mod:`pearl_moe.kernels.sm100.tma_descriptors`); ``launch`` supplies it (``workspace_for``:
allocated once per device, stream and expert count). Direct-store kernels take the same arguments
but never read the workspace (no descriptor pre-kernel runs); 256-bit direct stores need ``out``
32-byte aligned (``GemmConfig.output_alignment``, checked by ``grouped_gemm``). A B300 (compute
capability 10.3) runs these kernels compiled for ``sm_103a`` (:mod:`pearl_moe.kernels.targets`).

The kernels are compile-verified on a CPU (``python -m pearl_moe inspect``,
``tests/test_compile_sm100.py``, ``tests/test_sm100_interface.py``); none has ever run: that needs
a B200.
"""

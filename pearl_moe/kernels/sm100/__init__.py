"""Blackwell (sm_100a) kernels of the course, one module per stage.

* ``stage1_gemm``       one GEMM, one tile per CTA: TMA ring -> tcgen05 UMMA (TMEM) -> TMA store
* ``stage2_grouped``    one launch for all experts: CTA (x, y, z) = tile (x, y) of expert z
* ``stage3_persistent`` persistent, warp-specialized grouped GEMM, 1-CTA or 2-CTA (cta_group::2)

Each module follows the stage-module interface of :mod:`pearl_moe.kernels`: ``build(config)``,
``compile_kernel(config, n, k, experts, sms)``, ``compile_fake(config, m, n, k, experts)`` and
``launch(compiled, A, W, end_offsets, out, host_offsets, stream)``. The kernels take pointers, the
run-time row count and compile-time ``n``, ``k``, ``experts``, as the sm_90a ones do. One
difference: the grouped stages (2, 3) also take a ``workspace_ptr`` right after ``out_ptr``, the
per-expert C TMA descriptors (``E x 128 B``) that a small pre-kernel writes on the device;
``launch`` supplies it (``stage2_grouped.workspace_for``: allocated once per device, stream and
expert count).

The kernels are compile-verified on a CPU (``python -m pearl_moe inspect``,
``tests/test_compile_sm100.py``, ``tests/test_sm100_interface.py``); ``launch`` has not run yet:
it needs a B200.
"""

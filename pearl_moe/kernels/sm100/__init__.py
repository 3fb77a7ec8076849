"""Blackwell (sm_100a) kernels of the course, one module per stage.

* ``stage1_gemm``       one GEMM, one tile per CTA: TMA ring -> tcgen05 UMMA (TMEM) -> TMA store
* ``stage2_grouped``    one launch for all experts: CTA (x, y, z) = tile (x, y) of expert z
* ``stage3_persistent`` persistent, warp-specialized grouped GEMM, 1-CTA or 2-CTA (cta_group::2)

Each module exposes ``build(config)`` (the kernel object), ``fake_arguments(kernel, m, n, k,
experts)`` and ``compile_fake(config, m, n, k, experts)``. The kernels are compile-verified on a CPU
(``python -m pearl_moe inspect``); they need a B200 to run.
"""

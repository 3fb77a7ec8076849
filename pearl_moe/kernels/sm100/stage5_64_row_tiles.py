"""Stage 5 (sm_100a): stage 4 with 64-row tiles in 1-CTA mode (``tile_m=64``).

What changes from stage 4: ``tcgen05.mma`` with M = 64 (CUTLASS-style kernels allow it only in
2-CTA mode, 64 rows per CTA; here one CTA owns the whole 64-row tile). At decode an expert has
about 16 rows, so a 128-row tile reads 112 rows of padding per K tile; a 64-row tile halves the A
bytes per ring entry, which buys ring entries, and doubles the CTAs per expert.

* The accumulator lands in lanes 0-15 of each TMEM quarter; the epilogue reads it with
  ``tcgen05.ld.16x32bx2`` (:func:`~.row_tiles_64.sixteen_lane_load`), still one row per thread
  (``epi_tile_n / 2`` columns), still four epilogue warps, still 256-bit stores.
* Everything else (scheduler, pipelines, the direct store) is stage 4's code at ``tile_m = 64``.

Budget, tile 64 x 128 x 64 (1-CTA, direct store, two 64 x 128 accumulators)::

    A ring      9 x  64 x 64 x 2 B = 9 x  8 KB =  72 KB
    B ring      9 x 128 x 64 x 2 B = 9 x 16 KB = 144 KB
    barriers    (2 x 9 + 2 x 2) x 8 B + 64 B   = 240 B
    total       221,424 B of 232,448 (a tenth entry, 24 KB, would not fit)
    TMEM        256 columns allocated (the budget model's 2 x 128; the M = 64 layout packs the
                second accumulator into lanes 16-31 of the same 128 columns)

Compile-verified only: no B200 has ever run this kernel. Same interface as stage 3.
"""

from . import stage3_persistent
from .stage3_persistent import fake_arguments

__all__ = [
    "STAGE",
    "build",
    "can_implement",
    "compile_fake",
    "compile_kernel",
    "fake_arguments",
    "launch",
]

STAGE = 5

# The stage-3 kernel with the options up to this stage (the output alignment its stores need is
# GemmConfig.output_alignment, checked by grouped_gemm before the launch).
build, can_implement, compile_kernel, compile_fake, launch = stage3_persistent.stage_interface(
    STAGE
)

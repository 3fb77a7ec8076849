"""Stage 4 (sm_100a): the stage-3 kernel with a direct register -> global epilogue.

What changes from stage 3 (``epilogue="direct_store"``; the device code is
:meth:`~.direct_store.DirectStoreEpilogue.store_tile_direct`):

1. **No shared-memory epilogue buffer.** Each epilogue thread reads its accumulator row from TMEM
   ``epi_tile_n`` columns at a time, converts to bf16 and writes 64 contiguous bytes of its output
   row with two 256-bit stores (``STG.E.ENL2.256``). No ``STS``, no TMA store, no named barrier
   per slice, no per-expert C descriptor (the pre-kernel is not launched).
2. **Rows are guarded in the kernel.** The TMA store clipped rows at the expert's end through a
   per-expert descriptor; here a predicate per store (the row against the expert's valid rows,
   the column against ``n``) keeps every write inside the expert's rows of ``out``.
3. **The freed 24 KB become a seventh ring entry**, more bytes in flight at decode.

Budget, tile 128 x 128 x 64 (1-CTA, two 128 x 128 accumulators in TMEM)::

                stage 3 (TMA store)             stage 4 (direct store)
    A ring      6 x 16 KB =  96 KB              7 x 16 KB = 112 KB
    B ring      6 x 16 KB =  96 KB              7 x 16 KB = 112 KB
    epilogue    3 x 128 x 32 x 2 B = 24 KB      0
    barriers    (2 x 6 + 2 x 2) x 8 + 64 = 192 B    (2 x 7 + 2 x 2) x 8 + 64 = 208 B
    total       221,376 B                       229,584 B of 232,448 (an eighth would not fit)
    TMEM        256 columns (2 x 128)           256 columns

Store instructions per 128 x 128 tile: 128 rows x 256 B = 32 KB = 1024 stores of 32 B (8 per
thread); with ``store_bits=128`` 2048 stores of 16 B (16 per thread), the L2 traffic the post
moved away from. With 256-bit stores the output must be 32-byte aligned
(``GemmConfig.output_alignment``) and ``n % 16 == 0`` (:func:`can_implement`).

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

STAGE = 4

# The stage-3 kernel with the options up to this stage (the output alignment its stores need is
# GemmConfig.output_alignment, checked by grouped_gemm before the launch).
build, can_implement, compile_kernel, compile_fake, launch = stage3_persistent.stage_interface(
    STAGE
)

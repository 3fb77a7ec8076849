"""Stage 7 (sm_100a): the prefill tile with a split accumulator (``acc_slots=2``).

The post's last optimization, for its large tiles: 2-CTA 256 x 512 x 64 (a CTA pair, each CTA 128
rows and half of B's 512 columns), direct store, one accumulator buffer of 512 TMEM columns (all
of them) split into two 256-column slots with their own full/empty barriers. The MMA warp
starts the next tile's atom 0 (columns 0-255) as soon as the epilogue has released slot 0, holding
the first ``k_start`` ring entries until slot 1 is free too (device code:
:mod:`.split_accumulator`; the epilogue releases each slot after its last TMEM read,
:mod:`.direct_store`). This stage's config is not stage 6's plus one field: the idea only exists
for a 512-column accumulator (``pearl_moe.kernels.ladder.stage_config``).

Budget, 2-CTA 256 x 512 x 64, per CTA::

    A ring      4 x 128 x 64 x 2 B = 4 x 16 KB =  64 KB
    B ring      4 x 256 x 64 x 2 B = 4 x 32 KB = 128 KB
    barriers    (2 x 4 + 2 x 1 x 2) x 8 B + 64 B = 160 B
    total       196,768 B of 232,448 (a fifth entry, 48 KB, would not fit)
    TMEM        512 columns: 128 lanes x (slot 0: 0-255, slot 1: 256-511)
    k_start     2 (half the ring)

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

STAGE = 7

# The stage-3 kernel with the options up to this stage (the output alignment its stores need is
# GemmConfig.output_alignment, checked by grouped_gemm before the launch).
build, can_implement, compile_kernel, compile_fake, launch = stage3_persistent.stage_interface(
    STAGE
)

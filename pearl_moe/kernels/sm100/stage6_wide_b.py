"""Stage 6 (sm_100a): stage 5 with B ring entries that span two K tiles (``b_k_tiles=2``).

What changes from stage 5 (device code: :mod:`.wide_b`): the weights get a ring of their own whose
entries hold two adjacent K tiles, 256 contiguous bytes of every weight row per ``cute.copy``
(two ``UTMALDG`` of 128 bytes each: a 128B-swizzled box is at most 128 bytes wide). The A ring
keeps one K tile per entry and is released every K tile; a B entry is released after its second K
tile (or the tile's last). The idea: fewer, wider weight requests, more weight bytes buffered.

Budget, tile 64 x 128 x 64 (1-CTA, direct store, ``ring_depth`` 8 A entries, 4 B entries)::

    A ring      8 x  64 x  64 x 2 B = 8 x  8 KB =  64 KB
    B ring      4 x 128 x 128 x 2 B = 4 x 32 KB = 128 KB   (8 K tiles of B in flight, as of A)
    barriers    (2 x 8 + 2 x 4 + 2 x 2) x 8 B + 64 B = 288 B
    total       196,896 B of 232,448 (9 A entries would need a fifth B entry: 237,888 B)
    TMEM        256 columns, as stage 5

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

STAGE = 6

# The stage-3 kernel with the options up to this stage (the output alignment its stores need is
# GemmConfig.output_alignment, checked by grouped_gemm before the launch).
build, can_implement, compile_kernel, compile_fake, launch = stage3_persistent.stage_interface(
    STAGE
)

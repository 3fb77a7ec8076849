"""Stage 5 (sm_90a): 64-row tiles, one consumer warpgroup, so a ring entry shrinks from 32 KB to 24 KB.

What changes since stage 4
--------------------------
Only the configuration: ``tile_m=64``. A wgmma instruction is 64 rows tall and belongs to one
warpgroup, so the stage-3 kernel already runs a 64-row tile with one consumer warpgroup (on
Blackwell, 64-row tiles in 1-CTA mode need new code: 16-lane TMEM loads). No kernel code changes.

Why: at decode an expert has about 16 rows (GLM 5.3, 64 tokens per GPU, top-8 of 32 local
experts), so a 128-row A tile is 7/8 padding; at 64 rows it is 3/4. The A half of each ring
entry halves, so more entries fit, and there are twice as many tiles to spread over the SMs.
Budget at 64 x 128 x 64 on the H200 (232,448 B per block), direct store::

    A 64 x 64 x 2 B = 8 KB + B 128 x 64 x 2 B = 16 KB  ->  24 KB per entry
    9 entries x 24 KB + (2 x 9 x 8 + 64) B = 221,392 B      (10 would need 245,984 B)

Weight bytes in flight per SM: 9 x 16 KB = 144 KB (stage 4: 7 x 16 KB = 112 KB).

The kernel is stage 3's (:mod:`.stage3_persistent`); this module names the stage.
"""

from .stage3_persistent import build, compile_fake, compile_kernel, launch

__all__ = ["build", "compile_kernel", "compile_fake", "launch"]

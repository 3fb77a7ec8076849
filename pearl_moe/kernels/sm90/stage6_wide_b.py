"""Stage 6 (sm_90a): one B ring entry spans two K tiles, 256 contiguous bytes of each weight row.

What changes since stage 5
--------------------------
``b_k_tiles=2``: B gets its own ring (:class:`.wide_b.WideBLoads`) whose entries hold two
adjacent K tiles, ``tile_n x 128``; the A ring keeps one K tile per entry. The producer opens a
B entry every other K tile; the consumer reads k blocks ``(kt % 2) * 4 ..`` of it and releases it
after the second K tile. Each B copy fetches 256 contiguous bytes per weight row (two TMA
instructions, since a 128-byte-swizzled box is at most 128 bytes wide).

Budget at 64 x 128 x 64 on the H200 (232,448 B per block), direct store::

    A ring  8 entries x  8 KB =  64 KB
    B ring  4 entries x 32 KB = 128 KB   (8 K tiles of weights)
    barriers (2 x 8 + 2 x 4) x 8 B + 64 B = 256 B      total 196,864 B
    9 A entries would need 5 B entries: 237,856 B, too many.

So on Hopper the wider request costs one K tile of depth (stage 5 buffers 9 K tiles, this 8):
whether wider requests beat depth here is what the measurement decides.

The kernel is stage 3's (:mod:`.stage3_persistent`); this module names the stage.
"""

from .stage3_persistent import build, compile_fake, compile_kernel, launch

__all__ = ["build", "compile_kernel", "compile_fake", "launch"]

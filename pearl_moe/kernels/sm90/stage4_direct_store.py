"""Stage 4 (sm_90a): the epilogue stores straight from registers; its SMEM buffer becomes a ring entry.

What changes since stage 3
--------------------------
Only the epilogue (:meth:`.direct_store.DirectStoreEpilogue._store_direct`, switched on by
``epilogue="direct_store"``). Stage 3 converts the accumulator to bf16, writes it into a 24 KB
shared-memory buffer with ``stmatrix``, synchronizes the consumer warpgroups on a named barrier and
lets one thread TMA-store each 128 x 32 slice. Now every thread stores its own accumulator values
with 16-byte ``STG.E.128`` instructions (Hopper's widest global store; Blackwell's stage 4 uses
256-bit stores), after a shuffle inside each quad of lanes regroups the wgmma fragment into 8
contiguous columns per thread. Rows past the expert's end are not stored (one compare per row).

Why: at decode the kernel waits on weight bytes; the 24 KB buffer is worth most of a 32 KB ring
entry. Budget at 128 x 128 x 64 on the H200 (232,448 B per block)::

    stage 3:  6 entries x 32 KB + 24 KB epilogue + (2 x 6 x 8 + 64) B = 221,344 B   (7 do not fit)
    stage 4:  7 entries x 32 KB +  0            + (2 x 7 x 8 + 64) B = 229,552 B

One more K tile of A and B in flight per SM, and no named-barrier round trips per slice. The
store instructions do not get cheaper: 16 KB of bf16 output per warpgroup tile is 1024 16-byte
stores, 8 per thread, plus 3 shuffles per store.

The kernel is stage 3's (:mod:`.stage3_persistent`); this module names the stage.
"""

from .stage3_persistent import build, compile_fake, compile_kernel, launch

__all__ = ["build", "compile_kernel", "compile_fake", "launch"]

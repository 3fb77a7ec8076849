"""Stage 7 (sm_90a): two accumulators in two consumer warpgroups, taking alternate tiles (ping-pong).

What changes since stage 6
--------------------------
``acc_slots=2`` at ``tile_m=64`` (the course's tile; 128 x 128 tiles also fit one warpgroup's
registers and the tuner uses them at mid sizes): a second consumer warpgroup with its own accumulator
(:class:`.pingpong.PingPongTurns`). The warpgroups take alternate tiles of the CTA and hand the
mainloop over through two named barriers, so one stores its tile while the other multiplies the
next. Blackwell's stage 7 gets the same overlap by splitting its TMEM accumulator into two slots;
on Hopper an accumulator lives in a warpgroup's registers, so the second slot is a second
warpgroup (the "ping-pong" schedule of CUTLASS and quack).

Shared memory is stage 6's (196,864 B at 64 x 128 x 64); the block grows from 256 to 384 threads
(128 producer threads at 40 registers + 256 consumer threads at 232 = 64,512 of 65,536).

Where it should pay: when the epilogue is a visible part of a tile's time, i.e. large batches
where the wgmma pipe, not HBM, is the limit. At decode the consumers mostly wait on weights and
the store is short, so little is expected there.

The kernel is stage 3's (:mod:`.stage3_persistent`); this module names the stage.
"""

from .stage3_persistent import build, compile_fake, compile_kernel, launch

__all__ = ["build", "compile_kernel", "compile_fake", "launch"]

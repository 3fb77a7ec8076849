"""Notebook 01a's write-it-yourself exercise: the TMA producer's K loop over the ring.

The starter (notebook cell ``exercise-01-ring-producer``) is a whole kernel but for the producer's
loop body: the consumers already wait on ``full[s]`` and release ``empty[s]``. Its checks read what
the compiler made of the producer: the two TMA loads of a ring entry, the ``expect_tx`` byte count
its *full* barrier is armed with, the one lane that arms it (the whole warp runs the loop), and the
producer's own wait on the *empty* barrier (the starter has only the consumers' wait). TMA and
mbarriers are the same hardware on Hopper and Blackwell, so the kernel is compiled and checked for
both targets.
"""

import dataclasses

from . import (
    Exercise,
    expect_tx_includes,
    family_at_least,
    opcode_count_at_least,
    register,
)

#: One ring entry of the exercise kernel: a 128 x 64 box of A and one of B, in bf16.
ENTRY_BYTES = 2 * 128 * 64 * 2

register(
    Exercise(
        key="01-ring-producer",
        notebook="01a_stage1_kernel",
        task=(
            "Write the TMA producer's K loop: for K tile kt, wait until the consumers have "
            "released ring entry kt % RING (its empty barrier, with the parity of the producer's "
            "lap), arm the entry's full barrier from one lane with the bytes of one A box and "
            "one B box (expect_tx), then TMA-load both boxes into the entry on that barrier."
        ),
        checks=(
            dataclasses.replace(
                family_at_least("UTMALDG (TMA load)", 2),
                what="one TMA load of A and one of B per K tile (2 UTMALDG)",
            ),
            dataclasses.replace(
                expect_tx_includes(ENTRY_BYTES),
                what=f"full[s] armed with one entry's bytes, A box + B box (expect_tx {ENTRY_BYTES})",
            ),
            dataclasses.replace(
                opcode_count_at_least(r"^ELECT$", 1),
                what="one lane of the producer warp arms full[s] (cute.arch.elect_one(): ELECT)",
            ),
            dataclasses.replace(
                opcode_count_at_least(r"^SYNCS\.PHASECHK\..*TRYWAIT", 2),
                what=(
                    "the producer waits on empty[s] as the consumers wait on full[s] "
                    "(2 mbarrier waits, SYNCS.PHASECHK...TRYWAIT)"
                ),
            ),
        ),
    )
)

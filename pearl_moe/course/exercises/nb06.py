"""Notebook 06's exercise: the two-box B load (one B ring entry spans two K tiles)."""

from __future__ import annotations

import re

from . import Check, Exercise, register

#: One B entry of the exercise's kernel: 128 weight rows x two K tiles of 64 bf16.
ENTRY_BYTES = 128 * 2 * 64 * 2


def _armed_with_both_boxes(report) -> bool:
    """Every full barrier is armed with the whole entry's bytes (both boxes)."""
    return bool(report.expect_tx) and set(report.expect_tx) == {ENTRY_BYTES}


def tma_boxes(report) -> int:
    """TMA box loads in the PTX (``cp.async.bulk.tensor``): one per box, before ptxas, which may
    duplicate a load in the SASS on a divergent path."""
    return len(re.findall(r"cp\.async\.bulk\.tensor", report.ptx))


def _two_boxes_per_arm(report) -> bool:
    return bool(report.expect_tx) and tma_boxes(report) == 2 * len(report.expect_tx)


register(
    Exercise(
        key="06-two-box-b",
        notebook="06_wide_b_loads",
        task=(
            "Make one B ring entry span two K tiles (128 weight rows x 128 bf16: 256 bytes of "
            "each row): two 128 x 64 swizzled blocks side by side, filled by one copy that the "
            "TMA issues as two 128-byte-wide boxes, both completing on the entry's one full "
            "barrier, armed with both boxes' bytes."
        ),
        checks=(
            Check(
                f"every full barrier armed with both boxes' bytes, 2 x 128 x 64 x 2 = "
                f"{ENTRY_BYTES} B (expect_tx)",
                _armed_with_both_boxes,
            ),
            Check(
                "two TMA boxes per armed barrier (cp.async.bulk.tensor in the PTX = 2 x expect_tx)",
                _two_boxes_per_arm,
            ),
        ),
    )
)

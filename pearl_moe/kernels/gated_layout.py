"""The weight layout of a gate+up projection whose activation is fused into the epilogue.

Checkpoints store a gated MLP's first projection as two matrices, or one ``[gate; up]`` matrix of
``2 x intermediate`` rows. A fused epilogue needs each output's gate and up values in the same
thread. On sm_90a a wgmma accumulator gives a thread two neighbouring columns of every 8-column
group (:mod:`pearl_moe.kernels.sm90.direct_store`), so the rows are interleaved in blocks of 8:
rows ``16 m .. 16 m + 7`` are gate rows ``8 m .. 8 m + 7`` and rows ``16 m + 8 .. 16 m + 15`` the
up rows of the same outputs. Then accumulator groups ``2 m`` and ``2 m + 1`` hold gate and up of
output columns ``8 m .. 8 m + 7`` at the same register positions. On sm_100a a thread reads a run
of 16 or 32 consecutive accumulator columns of one row from TMEM, so every 16 of them are one
gate block and its up block: the same layout serves both epilogues.
"""

from __future__ import annotations

__all__ = ["GATE_UP_BLOCK", "gate_up_rows_problem", "interleave_gate_up", "deinterleave_gate_up"]

#: Rows of gate, then of up, per block of the interleaved layout.
GATE_UP_BLOCK = 8


def gate_up_rows_problem(rows: int, what: str = "w") -> str | None:
    """Why ``rows`` weight rows cannot hold gate and up in interleaved blocks (None: they can).

    The one rule a fused gated activation asks of ``n``: the kernels' ``can_implement``, the
    public call's validation and :func:`interleave_gate_up` all ask it here."""
    if rows % (2 * GATE_UP_BLOCK):
        return (
            f"{what} has {rows} rows: gate and up in blocks of {GATE_UP_BLOCK} "
            f"(interleave_gate_up) need a multiple of {2 * GATE_UP_BLOCK}"
        )
    return None


def _check(w, what: str):
    if w.dim() not in (2, 3):
        raise ValueError(f"{what} must be (2 x intermediate, hidden) or (experts, ..., hidden)")
    rows = w.shape[-2]
    problem = gate_up_rows_problem(rows, what)
    if problem:
        raise ValueError(problem)
    return rows // 2


def interleave_gate_up(w):
    """``[gate; up]`` rows (``(..., 2 I, hidden)``) -> the fused epilogue's layout: blocks of 8
    gate rows and 8 up rows, alternating. A new contiguous tensor; ``I`` a multiple of 8."""
    half = _check(w, "w")
    lead = w.shape[:-2]
    blocks = half // GATE_UP_BLOCK
    parts = w.reshape(*lead, 2, blocks, GATE_UP_BLOCK, w.shape[-1])
    return parts.transpose(-4, -3).reshape(w.shape).contiguous()


def deinterleave_gate_up(w):
    """The inverse of :func:`interleave_gate_up`: back to ``[gate; up]``."""
    half = _check(w, "w")
    lead = w.shape[:-2]
    blocks = half // GATE_UP_BLOCK
    parts = w.reshape(*lead, blocks, 2, GATE_UP_BLOCK, w.shape[-1])
    return parts.transpose(-4, -3).reshape(w.shape).contiguous()

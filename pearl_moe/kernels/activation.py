"""The fused gated activation's device math, shared by the sm_90a and sm_100a epilogues."""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32

__all__ = ["gated_value"]

LOG2_E = math.log2(math.e)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@cute.jit
def gated_value(
    gate: Float32,
    up: Float32,
    activation: cutlass.Constexpr,
    fast_reciprocal: cutlass.Constexpr = True,
):
    """``act(gate) * up`` in fp32: SiLU (``x / (1 + e^-x)``) for SwiGLU, GELU with the tanh
    approximation for GeGLU.

    With ``fast_reciprocal`` (the sm_90a epilogue) SiLU's division is a hardware reciprocal
    (``rcp.approx.ftz``: about 1 ulp of fp32, far below the bf16 output's rounding; a subnormal
    reciprocal, for gate below about -87, flushes the output to zero). An IEEE division compiles
    to a guard on every element and a called slow path for the operands the fast sequence cannot
    take, which cost the fused kernel up to 9% at decode on the H200
    (``experiments/fused_decode``). The sm_100a epilogue keeps the IEEE division: with the
    reciprocal its 128 x 256 2-CTA tile spills two registers, and without a B200 here the two
    cannot be weighed.
    """
    if cutlass.const_expr(activation == "swiglu"):
        denominator = 1.0 + cute.math.exp2(-gate * LOG2_E, fastmath=True)
        if cutlass.const_expr(fast_reciprocal):
            result = gate * up * cute.arch.rcp_approx(denominator)
        else:
            result = gate * up / denominator
    else:
        inner = SQRT_2_OVER_PI * (gate + 0.044715 * gate * gate * gate)
        result = 0.5 * gate * (1.0 + cute.math.tanh(inner, fastmath=True)) * up
    return result

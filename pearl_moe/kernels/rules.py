"""What the kernels of both architectures ask of a configuration and a shape, written once.

Each architecture's ``can_implement`` (:func:`pearl_moe.kernels.sm90.common.can_implement`,
:func:`pearl_moe.kernels.sm100.common.can_implement`) starts from :func:`shared_problems` and adds
the rules of its own kernels; :func:`pearl_moe.kernels.dispatch.can_implement` (also
``pearl_moe.kernels.api.can_implement``) asks the configuration's architecture. What the fields
alone must satisfy (the instructions the hardware has) is :class:`~pearl_moe.config.GemmConfig`'s,
checked when a configuration is made.
"""

from __future__ import annotations

from ..config import GemmConfig, smem_budget
from ..workloads import dim_problems
from .gated_layout import gate_up_rows_problem
from .ladder import stage_problems

__all__ = ["shared_problems"]


def shared_problems(
    arch: str, config: GemmConfig, stage: int, n: int | None = None, k: int | None = None
) -> list[str]:
    """Reasons any kernel of ``arch`` refuses ``config`` as stage ``stage`` (empty: none):

    * the configuration is for ``arch``;
    * it uses no option that arrives after ``stage`` (:func:`pearl_moe.kernels.ladder.stage_problems`);
    * the split accumulator (``acc_slots=2``) stores from the direct-store epilogue;
    * given the shape, TMA can address ``n`` and ``k`` (:func:`pearl_moe.workloads.dim_problems`),
      and with a fused activation W's ``n`` rows hold whole blocks of gate and up
      (:func:`pearl_moe.kernels.gated_layout.gate_up_rows_problem`);
    * the A/B ring and the epilogue fit the GPU's shared memory (:func:`pearl_moe.config.smem_budget`).

    ``n`` and ``k`` None: the rules of the configuration alone (any shape)."""
    if config.arch != arch:
        return [f"the {arch} kernels compile for {arch}, the config is for {config.arch}"]
    problems = stage_problems(config, stage)
    if config.acc_slots == 2 and config.epilogue != "direct_store":
        problems.append(
            "acc_slots=2 (the split accumulator) stores from the direct-store epilogue: on "
            "sm_100a each slot is released from it, on sm_90a the two consumer warpgroups would "
            "otherwise share one shared-memory epilogue buffer; it needs epilogue='direct_store'"
        )
    if n is not None and k is not None:
        problems += dim_problems(k, n)
        if config.activation is not None and (problem := gate_up_rows_problem(n, "W")):
            problems.append(f"a fused {config.activation}: {problem}")
    try:
        smem_budget(config.resolved())
    except ValueError as err:
        problems.append(str(err))
    return problems

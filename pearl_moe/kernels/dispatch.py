"""Which code runs a course stage: each architecture's three kernel modules, with the stage bound.

Stages 1-3 are three kernels; stages 4-7 run the persistent kernel (stage 3's module) with more
options (:data:`pearl_moe.kernels.ladder.KERNEL_STAGES`). :data:`KERNEL_FAMILIES` maps each
architecture to its modules with written-out imports, so the import graph shows which code an
architecture runs; the imports run on first use, because CuTe DSL picks its compile target when
it is imported. :func:`stage_module` gives a stage's :class:`StageKernel`, which the public call,
the compile cache's workers and the CPU inspection all use; :func:`can_implement` says whether a
stage runs a configuration at a shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from ..config import GemmConfig
from .ladder import kernel_module_name

__all__ = ["KERNEL_FAMILIES", "StageKernel", "can_implement", "stage_module"]


def _sm90_kernels() -> dict[str, ModuleType]:
    from .sm90 import stage1_gemm, stage2_grouped, stage3_persistent

    return {
        m.__name__.rsplit(".", 1)[1]: m for m in (stage1_gemm, stage2_grouped, stage3_persistent)
    }


def _sm100_kernels() -> dict[str, ModuleType]:
    from .sm100 import stage1_gemm, stage2_grouped, stage3_persistent

    return {
        m.__name__.rsplit(".", 1)[1]: m for m in (stage1_gemm, stage2_grouped, stage3_persistent)
    }


#: Architecture -> its three kernel modules by name. The imports run on first use (CuTe DSL picks
#: its compile target when it is imported), but they are written out, so the import graph shows
#: which code each architecture runs.
KERNEL_FAMILIES = {"sm_90a": _sm90_kernels, "sm_100a": _sm100_kernels}


@dataclass(frozen=True)
class StageKernel:
    """Course stage ``stage`` of ``arch``: its kernel module (:data:`KERNEL_FAMILIES`) with the
    stage bound. The persistent kernel (stages 3-7) takes the stage, which says what options a
    configuration may use (:func:`pearl_moe.kernels.ladder.stage_problems`); stages 1 and 2 are
    kernels of their own."""

    arch: str
    stage: int
    module: ModuleType

    @property
    def _stage(self) -> dict:
        return {"stage": self.stage} if self.stage >= 3 else {}

    def build(self, config: GemmConfig, sms: int | None = None):
        """The kernel object (nothing is compiled)."""
        if self.stage >= 3 and sms is not None:
            return self.module.build(config, sms, **self._stage)
        return self.module.build(config, **self._stage)

    def compile_kernel(self, config: GemmConfig, n: int, k: int, experts: int, sms=None):
        return self.module.compile_kernel(config, n, k, experts, sms, **self._stage)

    def compile_fake(self, config: GemmConfig, m: int, n: int, k: int, experts: int):
        return self.module.compile_fake(config, m, n, k, experts, **self._stage)

    def launch(self, compiled, A, W, end_offsets, out, host_offsets, stream, a_index=None) -> None:
        """``a_index``: A's rows through an index (sm_90a persistent kernel with ``gather_a``)."""
        if a_index is None:
            self.module.launch(compiled, A, W, end_offsets, out, host_offsets, stream)
        else:
            self.module.launch(compiled, A, W, end_offsets, out, host_offsets, stream, a_index)


def can_implement(
    config: GemmConfig, stage: int, n: int | None = None, k: int | None = None
) -> list[str]:
    """Reasons stage ``stage`` cannot run ``config`` at ``(n, k)`` (empty list: it can; ``n`` and
    ``k`` None: at any shape): the one answer, asked of the configuration's architecture
    (:func:`pearl_moe.kernels.sm90.common.can_implement` or
    :func:`pearl_moe.kernels.sm100.common.can_implement`).

    :func:`pearl_moe.kernels.grouped_gemm` asks it before it compiles or launches anything (as
    ``api.can_implement``); the runtime pick, the tuner's candidates and the course ask the same."""
    if config.arch == "sm_90a":
        from .sm90.common import can_implement as rules
    else:
        from .sm100.common import can_implement as rules
    return rules(config, stage, n, k)


def stage_module(arch: str, stage: int) -> StageKernel:
    """Stage ``stage``'s kernel on ``arch`` (imports the architecture's kernels on first use)."""
    name = kernel_module_name(arch, stage)  # ValueError for an unknown arch or stage
    return StageKernel(arch, stage, KERNEL_FAMILIES[arch]()[name.rsplit(".", 1)[1]])

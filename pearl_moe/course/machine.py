"""Where are we? A live Blackwell GPU, a live Hopper GPU, or a machine that replays results.

:func:`detect_machine` looks at the CUDA device torch sees and returns a :class:`Machine`: on a
Blackwell GPU the sm_100a kernels run, on a Hopper GPU the sm_90a twins run, and anywhere else
(a CPU, or another GPU) measurements are replayed from ``results/`` and Blackwell latency comes
from :mod:`pearl_moe.model.perfmodel`. ``PEARL_MOE_MACHINE=cpu`` forces the replay on any machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..hardware import GpuSpec, get_gpu

__all__ = ["FORCE_ENV", "Machine", "detect_machine"]

#: Set to "cpu" to replay results even where a GPU is present (used by tests and curious readers).
FORCE_ENV = "PEARL_MOE_MACHINE"


@dataclass(frozen=True)
class Machine:
    """What this process can run: ``mode`` is ``"blackwell"``, ``"hopper"`` or ``"cpu"``."""

    mode: str
    gpu_name: str | None = None
    capability: tuple[int, int] | None = None
    spec: GpuSpec | None = None

    @property
    def live(self) -> bool:
        """True when our kernels can run here (a Blackwell or Hopper GPU)."""
        return self.mode in ("blackwell", "hopper")

    @property
    def arch(self) -> str | None:
        return {"blackwell": "sm_100a", "hopper": "sm_90a"}.get(self.mode)

    def describe(self) -> str:
        if self.mode == "blackwell":
            return (
                f"live Blackwell GPU ({self.gpu_name}, sm_{self.capability[0]}{self.capability[1]}):"
                " the sm_100a kernels run here"
            )
        if self.mode == "hopper":
            return (
                f"live Hopper GPU ({self.gpu_name}, sm_{self.capability[0]}{self.capability[1]}): "
                "the sm_90a twins run here; Blackwell latency comes from the performance model"
            )
        why = f"{self.gpu_name} is neither Hopper nor Blackwell" if self.gpu_name else "no GPU"
        return (
            f"CPU replay ({why}): kernels are compiled, not run; measurements are replayed from "
            "results/ and Blackwell latency comes from the performance model"
        )


def detect_machine(force: str | None = None) -> Machine:
    """Look at the CUDA device torch sees (if any) and say which of the three cases we are in.

    ``force="cpu"`` (or the environment variable ``PEARL_MOE_MACHINE=cpu``) pretends there is no
    GPU, which replays recorded results even on a GPU machine.
    """
    force = force or os.environ.get(FORCE_ENV)
    if force not in (None, "", "cpu", "auto"):
        raise ValueError(f"force must be 'cpu' or 'auto', got {force!r}")
    if force == "cpu":
        return Machine("cpu")
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return Machine("cpu")
    if not torch.cuda.is_available():
        return Machine("cpu")
    name = torch.cuda.get_device_name()
    cap = tuple(torch.cuda.get_device_capability())
    try:
        spec = get_gpu(name)
    except ValueError:
        spec = None
    # a GPU the kernels have a target for (pearl_moe.kernels.targets); any other runs the course
    # as a CPU would
    mode = {"sm_90a": "hopper", "sm_100a": "blackwell"}.get(_family(cap), "cpu")
    return Machine(mode, name, cap, spec)  # type: ignore[arg-type]


def _family(capability) -> str | None:
    from ..kernels.targets import SUPPORTED

    return SUPPORTED.get(tuple(capability), (None, None))[0]

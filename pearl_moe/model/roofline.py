"""The roofline of a grouped GEMM: why the MoE kernel is IO-bound at decode and compute-bound at prefill.

A kernel that does ``F`` FLOPs and must move ``B`` bytes cannot finish faster than
``max(B / bandwidth, F / peak)``. Its **arithmetic intensity** ``I = F / B`` (FLOP per byte) says
which term wins: below the **ridge point** ``peak / bandwidth`` the bytes win (memory-bound), above
it the FLOPs do (compute-bound). Everything here is derived from datasheets, from the ceilings
measured on this project's H200 (``results/H200/*.json`` and ``*.json.gz``), and from the bytes a grouped GEMM must
move -- no kernel timing is involved.

For the MoE gate+up GEMM with ``E`` active local experts and ``m`` routed rows (bf16)::

    F = 2 m k n                          (each row meets each weight once, a multiply and an add)
    B = 2 (E n k + m k + m n)            (weights of the active experts, A once, out once)

At decode the weights dominate ``B``, so ``I ~= 2 m k n / (2 E n k) = m / E``: **the arithmetic
intensity is about the number of rows per expert**. GLM 5.3 at 64 tokens per GPU has 16 rows per
expert, so ``I ~= 16`` FLOP/B against a B200 ridge of 2.25 PFLOP/s / 8 TB/s ~= 281 FLOP/B: the
kernel is IO-bound by a factor of ~17, and what matters is streaming the weights, i.e. bytes in
flight (notebook 03c).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..hardware import B200, H200, GpuSpec, get_gpu
from ..workloads import GroupedProblem, get_model, make_problem

__all__ = [
    "Roof",
    "RooflinePoint",
    "datasheet_roof",
    "measured_h200_roof",
    "modeled_b200_roof",
    "roofs",
    "ridge_point",
    "arithmetic_intensity",
    "point",
    "points",
    "crossover_tokens",
    "DECODE_TOKENS",
    "PREFILL_TOKENS",
]

DECODE_TOKENS = (16, 64, 256)
PREFILL_TOKENS = (4096,)
RESULTS = Path(__file__).resolve().parents[2] / "results"


@dataclass(frozen=True)
class Roof:
    """Peak rate and bandwidth of one GPU, and where they come from."""

    gpu: str
    flops_per_s: float
    bytes_per_s: float
    source: str  # "datasheet", "measured (...)" or "modeled (...)"

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two limits meet."""
        return self.flops_per_s / self.bytes_per_s

    def attainable(self, intensity: float) -> float:
        """FLOP/s a kernel of this intensity can reach at best: ``min(peak, I x bandwidth)``."""
        return min(self.flops_per_s, intensity * self.bytes_per_s)

    def label(self) -> str:
        return (
            f"{self.gpu} {self.source}: {self.flops_per_s / 1e12:.0f} TFLOP/s, "
            f"{self.bytes_per_s / 1e12:.2f} TB/s, ridge {self.ridge:.0f} FLOP/B"
        )


def datasheet_roof(gpu: GpuSpec | str) -> Roof:
    gpu = get_gpu(gpu)
    return Roof(gpu.name, gpu.bf16_dense_flops, gpu.hbm_bytes_per_s, "datasheet")


def _median(values: Sequence[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def measured_h200_roof(root: str | Path | None = None) -> Roof | None:
    """The H200's ceilings measured by the benchmark runs committed in ``results/H200/``: the
    median over runs of the read probe (sum over 4.3 GB) and of the dense 8192^3 bf16 matmul.
    None where no run is committed."""
    from ..results import runs

    reads, flops = [], []
    for _, run in runs("H200", root or RESULTS):
        ceilings = run["ceilings"]
        reads.append(ceilings.get("read_probe_bytes_per_s", ceilings["read_bytes_per_s"]))
        flops.append(ceilings["bf16_flops_per_s"])
    if not reads:
        return None
    return Roof(
        "H200",
        _median(flops),
        _median(reads),
        f"measured (median of {len(reads)} runs in results/H200)",
    )


def modeled_b200_roof(root: str | Path | None = None) -> Roof:
    """B200 datasheet rates scaled by the fractions of its datasheet the H200 reached (no B200 was
    measured): what :mod:`pearl_moe.model.perfmodel` assumes."""
    h200 = measured_h200_roof(root)
    if h200 is None:
        from .perfmodel import CALIBRATED

        bw, fl = CALIBRATED.hbm_efficiency, CALIBRATED.mma_efficiency
    else:
        bw = h200.bytes_per_s / H200.hbm_bytes_per_s
        fl = h200.flops_per_s / H200.bf16_dense_flops
    return Roof(
        "B200",
        B200.bf16_dense_flops * fl,
        B200.hbm_bytes_per_s * bw,
        f"modeled (datasheet x H200 measured fractions {bw:.2f}, {fl:.2f})",
    )


def roofs(root: str | Path | None = None) -> list[Roof]:
    """B200 datasheet, H200 datasheet and (if committed) H200 measured."""
    out = [datasheet_roof(B200), datasheet_roof(H200)]
    measured = measured_h200_roof(root)
    if measured is not None:
        out.append(measured)
    return out


def ridge_point(gpu: GpuSpec | str, source: str = "datasheet") -> float:
    """FLOP per byte at the ridge: ``source`` is "datasheet" or, for the H200, "measured"."""
    if source == "datasheet":
        return datasheet_roof(gpu).ridge
    if source == "measured":
        if get_gpu(gpu).name != "H200":
            raise ValueError("measured ceilings exist only for the H200 (results/H200)")
        roof = measured_h200_roof()
        if roof is None:
            raise ValueError("no H200 run is committed under results/H200")
        return roof.ridge
    raise ValueError(f"source must be 'datasheet' or 'measured', got {source!r}")


def arithmetic_intensity(problem: GroupedProblem) -> float:
    """FLOPs per byte that must move (weights of active experts + A + out, bf16)."""
    moved = problem.bytes_moved()
    return problem.flops / moved if moved else 0.0


@dataclass(frozen=True)
class RooflinePoint:
    model: str
    tokens_per_gpu: int
    rows_per_expert: float
    flops: int
    bytes_moved: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes_moved

    @property
    def phase(self) -> str:
        return "prefill" if self.tokens_per_gpu in PREFILL_TOKENS else "decode"

    def bound_on(self, roof: Roof) -> str:
        return "memory" if self.intensity < roof.ridge else "compute"

    def floor_seconds(self, roof: Roof) -> float:
        return max(self.bytes_moved / roof.bytes_per_s, self.flops / roof.flops_per_s)


def point(model: str, tokens_per_gpu: int, ep: int = 8) -> RooflinePoint:
    p = make_problem(model, tokens_per_gpu, ep=ep)
    return RooflinePoint(
        get_model(model).name, tokens_per_gpu, p.rows / p.experts, p.flops, p.bytes_moved()
    )


def points(
    models: Iterable[str] = ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"),
    tokens: Iterable[int] = DECODE_TOKENS + PREFILL_TOKENS,
    ep: int = 8,
) -> list[RooflinePoint]:
    """The three models' decode (16/64/256 tokens per GPU) and prefill (4096) shapes, EP=8."""
    tokens = list(tokens)
    return [point(m, t, ep) for m in models for t in tokens]


def crossover_tokens(model: str, roof: Roof, ep: int = 8, limit: int = 1 << 16) -> int:
    """Fewest tokens per GPU (balanced routing) whose intensity reaches ``roof``'s ridge."""
    lo, hi = 1, limit
    if point(model, hi, ep).intensity < roof.ridge:
        raise ValueError(f"{model} stays below the ridge up to {limit} tokens per GPU")
    while lo < hi:
        mid = (lo + hi) // 2
        if point(model, mid, ep).intensity >= roof.ridge:
            hi = mid
        else:
            lo = mid + 1
    return lo

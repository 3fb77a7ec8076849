"""GPU specifications used by the models, and detection of the GPU this process runs on.

Values come from ``shared/reference/facts.md``: datasheets for bandwidth and peak rates, the CUDA
programming guide for shared memory, the PTX ISA for tensor memory, and this project's own
measurements on the H200 (marked ``measured``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuSpec", "B200", "H200", "H100", "GPUS", "get_gpu", "detect_gpu"]


@dataclass(frozen=True)
class GpuSpec:
    """What the occupancy, budget and performance models need to know about one GPU."""

    name: str
    arch: str  # compile target of the course's kernels: "sm_100a" or "sm_90a"
    sms: int
    smem_per_sm: int  # bytes
    smem_per_block: int  # bytes a block may opt in to
    tmem_lanes: int  # 0 where the GPU has no tensor memory
    tmem_columns: int
    l2_bytes: int
    hbm_bytes_per_s: float  # datasheet
    bf16_dense_flops: float  # datasheet, dense
    max_clock_hz: float
    bf16_flop_per_clk_per_sm: int
    source: str

    @property
    def has_tmem(self) -> bool:
        return self.tmem_lanes > 0

    @property
    def tmem_bytes(self) -> int:
        return self.tmem_lanes * self.tmem_columns * 4

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity above which bf16 GEMM stops being memory-bound (datasheet rates)."""
        return self.bf16_dense_flops / self.hbm_bytes_per_s


KB = 1024

B200 = GpuSpec(
    name="B200",
    arch="sm_100a",
    sms=148,
    smem_per_sm=228 * KB,
    smem_per_block=227 * KB,
    tmem_lanes=128,
    tmem_columns=512,
    l2_bytes=int(126.5 * 1024 * 1024),
    hbm_bytes_per_s=8.0e12,
    bf16_dense_flops=2.25e15,
    max_clock_hz=1.965e9,
    bf16_flop_per_clk_per_sm=8192,
    source="NVIDIA datasheet and Blackwell tuning guide; SM count and L2 from third-party reports",
)

H200 = GpuSpec(
    name="H200",
    arch="sm_90a",
    sms=132,
    smem_per_sm=233_472,
    smem_per_block=232_448,
    tmem_lanes=0,
    tmem_columns=0,
    l2_bytes=62_914_560,
    hbm_bytes_per_s=4.8e12,
    bf16_dense_flops=989e12,
    max_clock_hz=1.98e9,
    bf16_flop_per_clk_per_sm=4096,
    source="NVIDIA datasheet; SMs, shared memory, L2 and clock measured on this project's H200",
)

H100 = GpuSpec(
    name="H100",
    arch="sm_90a",
    sms=132,
    smem_per_sm=228 * KB,
    smem_per_block=227 * KB,
    tmem_lanes=0,
    tmem_columns=0,
    l2_bytes=50 * 1024 * 1024,
    hbm_bytes_per_s=3.35e12,
    bf16_dense_flops=989e12,
    max_clock_hz=1.98e9,
    bf16_flop_per_clk_per_sm=4096,
    source="NVIDIA datasheet (H100 SXM); CUDA C++ programming guide for shared memory",
)

GPUS: dict[str, GpuSpec] = {g.name: g for g in (B200, H200, H100)}


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """Look a GPU up by name, case-insensitively ("b200", "H200", "NVIDIA H200" all work)."""
    if isinstance(name, GpuSpec):
        return name
    key = str(name).upper().replace("NVIDIA", "").strip()
    for spec_name, spec in GPUS.items():
        if key == spec_name or key.startswith(spec_name + " ") or key.startswith(spec_name + "-"):
            return spec
    raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")


def detect_gpu() -> GpuSpec | None:
    """The spec of the CUDA GPU torch sees, or None without one (or for a GPU we have no spec of)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if not torch.cuda.is_available():
        return None
    try:
        return get_gpu(torch.cuda.get_device_name())
    except ValueError:
        return None

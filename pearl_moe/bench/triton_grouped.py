"""A grouped GEMM in Triton, written for this project as a baseline.

One launch computes every expert's ``out[rows_e] = A[rows_e] @ W[e].T``. The work is a flat list of
output tiles, ordered expert by expert; inside an expert, its row blocks vary fastest, then its
column blocks. A program finds which expert a tile belongs to from the offsets alone, on the GPU:

    counts_e   = end_e - end_{e-1}
    tiles_e    = ceil(counts_e / BLOCK_M) * ceil(n / BLOCK_N)      (0 for a zero-row expert)
    tile_end_e = cumsum(tiles_e)
    expert(t)  = number of experts whose tile_end_e <= t

so the launch needs no host-side copy of the offsets and can be captured in a CUDA graph. The grid
is sized from an upper bound known on the host without looking at the offsets,
``(rows // BLOCK_M + min(E, rows)) * ceil(n / BLOCK_N)``; tiles past the real count do nothing. With
``persistent=True`` the grid is capped at a few programs per SM and each program strides over tiles.

Rows past an expert's end and columns past ``n`` are masked, so zero-row experts, one-row experts
and ``n`` that is not a multiple of the tile all work. Triton is imported only when this module is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import triton
import triton.language as tl

__all__ = [
    "TritonConfig",
    "CONFIGS",
    "grouped_gemm",
    "launch_grid",
    "candidate_configs",
    "read_stream",
]


@dataclass(frozen=True)
class TritonConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    persistent: bool = False
    programs_per_sm: int = 2

    @property
    def name(self) -> str:
        p = f"_p{self.programs_per_sm}" if self.persistent else ""
        return (
            f"m{self.block_m}n{self.block_n}k{self.block_k}_w{self.num_warps}s{self.num_stages}{p}"
        )

    def as_dict(self) -> dict:
        return {"name": self.name, **asdict(self)}


#: Candidates tried per problem (a small search; compiled once each and reused across shapes).
CONFIGS = (
    TritonConfig(16, 64, 128, 4, 4),
    TritonConfig(16, 128, 128, 4, 4),
    TritonConfig(32, 128, 64, 4, 5),
    TritonConfig(64, 128, 64, 4, 4),
    TritonConfig(64, 256, 64, 8, 4),
    TritonConfig(128, 256, 64, 8, 3),
    TritonConfig(128, 128, 64, 8, 3, persistent=True),
    TritonConfig(128, 256, 64, 8, 3, persistent=True),
)


def candidate_configs(rows_per_active_expert: float) -> list[TritonConfig]:
    """Configs worth timing for a given average number of rows per expert that has rows."""
    r = max(1.0, rows_per_active_expert)
    keep = [c for c in CONFIGS if c.block_m <= max(16, 2 * r) and c.block_m * 16 >= r]
    return keep or [CONFIGS[0]]


@triton.jit(do_not_specialize=["num_experts", "iters"])
def grouped_gemm_kernel(
    a_ptr,
    w_ptr,
    c_ptr,
    offs_ptr,
    num_experts,
    n,
    k,
    stride_am,
    stride_we,
    stride_wn,
    stride_cm,
    iters,
    E_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)

    # Per-expert row ranges and tile counts, from the end offsets (padded experts get 0 rows).
    e_idx = tl.arange(0, E_PAD)
    in_range = e_idx < num_experts
    ends = tl.load(offs_ptr + e_idx, mask=in_range, other=0)
    starts = tl.load(offs_ptr + e_idx - 1, mask=in_range & (e_idx > 0), other=0)
    counts = tl.where(in_range, ends - starts, 0)
    m_blocks = (counts + BLOCK_M - 1) // BLOCK_M
    n_blocks = tl.cdiv(n, BLOCK_N)
    tiles = m_blocks * n_blocks
    tile_end = tl.cumsum(tiles, 0)
    total = tl.sum(tiles, 0)

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Each program takes tiles pid, pid + nprog, ... ; `iters` (from the host) bounds the loop.
    for it in range(0, iters):
        tile = pid + it * nprog
        if tile < total:
            # Which expert owns this tile, and where the tile sits inside that expert.
            e = tl.sum((tile_end <= tile).to(tl.int32), 0)
            sel = e_idx == e
            e_first_tile = tl.sum(tl.where(sel, tile_end - tiles, 0), 0)
            e_m_blocks = tl.sum(tl.where(sel, m_blocks, 0), 0)
            row_begin = tl.sum(tl.where(sel, starts, 0), 0)
            row_end = tl.sum(tl.where(sel, ends, 0), 0)
            local = tile - e_first_tile
            mb = local % e_m_blocks
            nb = local // e_m_blocks

            rows = row_begin + mb * BLOCK_M + offs_m  # (BLOCK_M,)
            cols = nb * BLOCK_N + offs_n  # (BLOCK_N,)
            row_ok = rows < row_end
            col_ok = cols < n
            # A tile (BLOCK_M, BLOCK_K) and W[e] tile read as its transpose (BLOCK_K, BLOCK_N).
            a_ptrs = a_ptr + rows[:, None].to(tl.int64) * stride_am + offs_k[None, :]
            w_ptrs = (
                w_ptr
                + e.to(tl.int64) * stride_we
                + cols[None, :].to(tl.int64) * stride_wn
                + offs_k[:, None]
            )
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BLOCK_K)):
                if EVEN_K:
                    a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
                    if EVEN_N:
                        b = tl.load(w_ptrs)
                    else:
                        b = tl.load(w_ptrs, mask=col_ok[None, :], other=0.0)
                else:
                    k_ok = kk * BLOCK_K + offs_k < k
                    a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                    b = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
                acc = tl.dot(a, b, acc)
                a_ptrs += BLOCK_K
                w_ptrs += BLOCK_K
            c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :]
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _e_pad(experts: int) -> int:
    # One padded width for every model of the course (32, 48, 112 local experts) keeps it to one
    # compiled kernel per config.
    return max(128, triton.next_power_of_2(experts))


def launch_grid(
    rows: int, experts: int, n: int, cfg: TritonConfig, sms: int, capped: bool = True
) -> int:
    """Programs launched: an upper bound on the tile count known without reading the offsets
    (capped at ``programs_per_sm`` per SM for a persistent config unless ``capped=False``)."""
    n_blocks = triton.cdiv(n, cfg.block_n)
    upper = (rows // cfg.block_m + min(experts, rows)) * n_blocks
    if cfg.persistent and capped:
        upper = min(upper, sms * cfg.programs_per_sm)
    return max(1, upper)


def grouped_gemm(A, W, offsets, out, cfg: TritonConfig, sms: int | None = None):
    """out[rows_e] = A[rows_e] @ W[e].T for every expert, one launch. Shapes are not re-checked."""
    rows, k = A.shape
    experts, n, _ = W.shape
    if sms is None:
        import torch

        sms = torch.cuda.get_device_properties(A.device).multi_processor_count
    upper = launch_grid(rows, experts, n, cfg, sms, capped=False)
    programs = launch_grid(rows, experts, n, cfg, sms)
    grid = (programs,)
    grouped_gemm_kernel[grid](
        A,
        W,
        out,
        offsets,
        experts,
        n,
        k,
        A.stride(0),
        W.stride(0),
        W.stride(1),
        out.stride(0),
        triton.cdiv(upper, programs),
        E_PAD=_e_pad(experts),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        EVEN_K=k % cfg.block_k == 0,
        EVEN_N=n % cfg.block_n == 0,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out


# ------------------------------------------------------------------ a read-bandwidth probe
@triton.jit(do_not_specialize=["numel", "iters"])
def _read_stream_kernel(x_ptr, partial_ptr, numel, iters, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for it in range(0, iters):
        idx = (it * nprog + pid).to(tl.int64) * BLOCK + offs  # neighbours read neighbouring blocks
        acc += tl.load(x_ptr + idx, mask=idx < numel, other=0.0).to(tl.float32)
    tl.store(partial_ptr + pid, tl.sum(acc, 0))


def read_stream(x, partial=None, programs: int | None = None, block: int = 8192):
    """Sum ``x`` (flattened) into one partial per program: reads every byte once, writes almost
    nothing. Used as a second read-bandwidth probe next to ``torch.sum``."""
    import torch

    if programs is None:
        programs = 8 * torch.cuda.get_device_properties(x.device).multi_processor_count
    if partial is None:
        partial = torch.empty(programs, dtype=torch.float32, device=x.device)
    numel = x.numel()
    iters = triton.cdiv(triton.cdiv(numel, block), programs)
    _read_stream_kernel[(programs,)](x, partial, numel, iters, BLOCK=block, num_warps=8)
    return partial

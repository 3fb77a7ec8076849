"""Host-side setup shared by the sm_90a and sm_100a kernels.

* turning torch tensors into CuTe DSL pointers (all kernels take raw pointers plus the run-time row
  count; ``n``, ``k`` and the expert count are compile-time constants);
* the offsets tensor on the device, in torch ``grouped_mm`` convention (E end offsets), viewed
  without a copy when the caller passed ``cu_seqlens`` (E + 1 entries, leading 0);
* the launch of the naive per-expert loop (stage 1 of both architectures);
* a plain-Python model of stage 2's grid (:func:`grouped_grid`: one CTA per (m tile, n tile,
  expert)), used by notebooks; the kernels compute it inside their host ``__call__`` (rows > 0);
* a plain-Python model of the tile scheduler (:func:`schedule_tiles`) that the device scheduler
  in :mod:`pearl_moe.kernels.scheduler` must agree with, used by tests and notebooks.
"""

from __future__ import annotations

from ..config import GemmConfig

__all__ = [
    "bf16_ptr",
    "placeholder_ptr",
    "launch_per_expert",
    "i32_ptr",
    "device_end_offsets",
    "cdiv",
    "grouped_grid",
    "schedule_tiles",
    "cuda_stream",
    "tile_counter",
    "tile_counter_ptr",
    "COUNTER_WORDS",
    "LOCKSTEP_BASE",
    "MAX_LOCKSTEP_CTAS",
]

#: The per-stream counter buffer (:func:`tile_counter`) in int32 words: word 0 is the dynamic
#: schedule's tile counter, word 1 the lockstep schedule's count of CTAs that are done, and word
#: ``LOCKSTEP_BASE + c`` the last round CTA ``c`` of a lockstep launch has reached (plus one).
LOCKSTEP_BASE = 2
MAX_LOCKSTEP_CTAS = 256
COUNTER_WORDS = LOCKSTEP_BASE + MAX_LOCKSTEP_CTAS

#: One tile counter per (torch device, stream handle) with its kernel argument: the dynamic
#: schedule's (see :func:`tile_counter`).
_TILE_COUNTERS: dict = {}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def bf16_ptr(t, offset_elems: int = 0):
    """A 16-byte-aligned global bf16 pointer to ``t``'s storage plus ``offset_elems`` elements."""
    import cutlass
    import cutlass.cute as cute

    addr = t.data_ptr() + 2 * offset_elems
    return cute.runtime.make_ptr(cutlass.BFloat16, addr, cute.AddressSpace.gmem, assumed_align=16)


def i32_ptr(t):
    import cutlass
    import cutlass.cute as cute

    return cute.runtime.make_ptr(
        cutlass.Int32, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=4
    )


def placeholder_ptr(dtype=None, align: int = 16):
    """A null global pointer of ``dtype`` (default bf16) for ``cute.compile`` without tensors.

    Every kernel is compiled against pointers, so one compiled kernel serves any data; the
    alignment promised here is what the kernel may assume (TMA needs 16 bytes).
    """
    import cutlass
    import cutlass.cute as cute

    dtype = dtype or cutlass.BFloat16
    return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)


def launch_per_expert(compiled, A, W, out, host_offsets, stream) -> None:
    """The naive MoE loop of stage 1, for both architectures: one dense-GEMM launch per expert
    with rows, each on that expert's slice of A, W and out (rows sliced on the host)."""
    k = A.shape[1]
    n = W.shape[1]
    start = 0
    for e, end in enumerate(host_offsets):
        rows = end - start
        if rows > 0:
            compiled(
                bf16_ptr(A, start * k),
                bf16_ptr(W, e * n * k),
                bf16_ptr(out, start * n),
                rows,
                stream,
            )
        start = end


def cuda_stream(device=None):
    """The torch current stream as a ``CUstream`` (so kernels are captured by CUDA graphs)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream(device).cuda_stream)


def tile_counter(device, stream=None):
    """The int32 counter buffer (:data:`COUNTER_WORDS` words) of the persistent kernels' dynamic
    and lockstep schedules; word 0 is the tile counter the dynamic schedule claims tiles from.

    Zeroed once when first asked for; every launch leaves it at 0 again
    (:meth:`pearl_moe.kernels.scheduler.TileScheduler.claim_issue`,
    :meth:`~pearl_moe.kernels.scheduler.TileScheduler.lockstep_done`), so it is kept, one per
    device and stream: two launches that ran at the same time on one counter would mix their
    tiles. A CUDA graph keeps the counter of the stream it was captured on, so two graphs captured
    on one stream must not be replayed at the same time. (A launch that dies half-way leaves the
    buffer elsewhere than 0: make a new one.) Static schedules are passed it too and never touch
    it.
    """
    return _counter_entry(device, stream)[0]


def tile_counter_ptr(device, stream=None):
    """:func:`tile_counter`'s kernel argument, made once with the counter: a persistent launch
    passes it with every schedule, and a dictionary lookup is all it then costs on the host
    (making the counter's key and pointer anew took about 1.5 us per launch)."""
    return _counter_entry(device, stream)[1]


def _counter_entry(device, stream):
    handle = int(stream) if stream is not None else 0
    if not isinstance(device, str) and getattr(device, "index", None) is not None:
        entry = _TILE_COUNTERS.get((device, handle))  # a torch.device with its index, as a
        if entry is not None:  # tensor's: no device to make or resolve
            return entry
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    entry = _TILE_COUNTERS.get((dev, handle))
    if entry is None:
        counter = torch.zeros(COUNTER_WORDS, dtype=torch.int32, device=dev)
        # setdefault: a thread that raced us here keeps its entry, and nobody frees a counter
        # that a launch or a captured graph may already use
        entry = _TILE_COUNTERS.setdefault((dev, handle), (counter, i32_ptr(counter)))
    return entry


def device_end_offsets(offsets, experts: int):
    """``offsets`` as E int32 end offsets on its device, a view (no copy, no sync) when possible."""
    import torch

    if offsets.dtype != torch.int32:
        offsets = offsets.to(torch.int32)
    if offsets.numel() == experts + 1:
        offsets = offsets[1:]  # cu_seqlens: drop the leading 0
    return offsets.contiguous()


def grouped_grid(rows: int, n: int, experts: int, config: GemmConfig) -> tuple[int, int, int]:
    """Stage 2: CTA (x, y, z) = (m tile, n tile, expert). No expert has more than ``rows`` rows,
    so ``cdiv(rows, tile_m)`` m tiles always suffice; CTAs past their expert's rows exit at once."""
    return (max(1, cdiv(rows, config.tile_m)), cdiv(n, config.tile_n), experts)


def schedule_tiles(counts, n: int, tile_m: int, tile_n: int, ctas: int | None = None):
    """The (expert, m tile, n tile, first row, valid rows) work list in scheduler order.

    Tiles are numbered expert by expert; inside an expert the m tile varies fastest, so CTAs that
    run at the same time share one n tile of the expert's weights (one HBM read, several L2 hits).
    With ``ctas`` given, returns one list per CTA (CTA ``c`` takes tiles ``c, c + ctas, ...``).
    """
    n_tiles = cdiv(n, tile_n)
    work = []
    start = 0
    for e, rows in enumerate(counts):
        m_tiles = cdiv(rows, tile_m)
        for t in range(m_tiles * n_tiles):
            m_tile, n_tile = t % m_tiles, t // m_tiles
            first = start + m_tile * tile_m
            work.append((e, m_tile, n_tile, first, min(tile_m, start + rows - first)))
        start += rows
    if ctas is None:
        return work
    return [work[c::ctas] for c in range(ctas)]

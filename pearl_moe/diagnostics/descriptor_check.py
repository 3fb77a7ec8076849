"""GPU check of the per-expert TMA store descriptors (:mod:`pearl_moe.kernels.sm100.tma_descriptors`).

The sm_100a grouped stages store each expert's tiles through a descriptor that a pre-kernel writes
on the device: a copy of the host-encoded descriptor of the whole output, patched to the expert's
rows with ``tensormap.replace``. A descriptor is the same 128-byte ``CUtensorMap`` on sm_90a and
sm_100a, and the TMA store reads it the same way, so a Hopper GPU can check that path before any
Blackwell GPU runs it. :func:`check_descriptors` runs a small probe kernel (no tensor cores: one
CTA per expert, four warps) for the architecture of the GPU it runs on.

The probe stores with **the GEMM's own C store atom**: :class:`DescriptorProbe` is the sm_100a
persistent kernel's class, so its epilogue tile, its staging layout in shared memory (box and
swizzle: 128 x 32 bf16 with a 64-byte swizzle for a 128-row CTA tile and ``epi_tile_n=32``; two
64 x 16 boxes with a 32-byte swizzle for the folded 2-CTA 128-row tile) and its TMA store atom are
built by the kernel's methods, for each TMA-store configuration in :data:`STORE_CONFIGS`. And it
issues **the acquire side as the kernel does**: the stores of a tile come from one whole warp,
after that warp's ``fence.proxy.tensormap::generic.acquire`` of the expert's descriptor (per tile,
from the generic address), one ``cute.copy`` a subtile (the DSL elects the issuing thread) with a
bulk-group commit and wait for a free staging buffer after each, in a launch after the one that
wrote the descriptors. It reports, per configuration:

* **bytes**: for every expert, the device-patched descriptor against the one the DSL's host path
  encodes for the same ``(rows_e, n)`` view (the descriptor a kernel's TMA atom carries, read back
  through the same 64-byte ``copy_tensormap``), and against a descriptor *encoded* on the device (a
  TMA atom built inside the kernel: what the pre-kernel did before), byte by byte; the driver's
  own ``cuTensorMapEncodeTiled`` bytes for the view (with the atom's box and swizzle) are
  recorded beside them;
* **stores**: every expert, alone and all at once, writes a known pattern through its patched
  descriptor, tile by tile and subtile by subtile as the GEMM's epilogue, into a poisoned output
  inside a guard band. Every row of the expert must hold its pattern, and nothing outside the
  expert's rows may change: the box rows past the expert's end must be clipped by the TMA unit.
  Then as the grouped kernels do it: one launch writes the descriptors of new offsets into a
  workspace that held others, the next launch stores through them.

Run it with ``python -m pearl_moe selftest --phases descriptors`` or through the GPU test
``tests/test_tma_descriptors_gpu.py``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from ..config import MAX_MMA_N, GemmConfig
from ..hardware import B200
from ..kernels import scheduler
from ..kernels.ladder import stage_config
from ..kernels.sm100.stage3_persistent import PersistentGroupedGemmKernel
from ..kernels.sm100.tma_descriptors import (
    TMA_DESCRIPTOR_BYTES,
    descriptor_ptr,
    expert_output_view,
    workspace_gmem_ptr,
    write_expert_descriptor,
)

__all__ = [
    "DEFAULT_ROWS",
    "DescriptorProbe",
    "STORE_CONFIGS",
    "check_all",
    "check_descriptors",
    "format_report",
    "store_box",
]

#: Expert sizes that stress the descriptor: one row, either side of 16 rows (one field of the
#: device encoder's output changes there), more than one 128-row box, and an empty expert.
DEFAULT_ROWS = (1, 15, 16, 200, 0, 37)
#: Output columns of the probe: a whole number of every configuration's tiles (128 to 512 wide).
DEFAULT_N = 512


def _tma(**changes) -> GemmConfig:
    return stage_config("sm_100a", 3).with_(**changes)


#: The TMA-store epilogues of the sm_100a kernels: ``name -> config``. The 1-CTA 128-row tile
#: (stage 3's course configuration, and 256 wide), the 2-CTA 256-row tile (128 rows a CTA: the
#: same box), the folded 2-CTA 128-row tiles (64 rows a CTA, each step two halves of
#: ``epi_tile_n / 2`` columns, folded per 256-column atom), and the other staging widths a
#: configuration may ask for (16 and 64 columns: 32- and 128-byte swizzles).
STORE_CONFIGS = {
    "1cta-128x128": _tma(),
    "1cta-128x256": _tma(tile_n=256),
    "2cta-256x256": _tma(tile_m=256, tile_n=256, cta_group=2),
    "2cta-128x256-folded": _tma(tile_n=256, cta_group=2),
    "2cta-128x512-folded": stage_config("sm_100a", 7).with_(
        tile_m=128, epilogue="tma_store", acc_slots=1
    ),
    "1cta-128x128-epi16": _tma(epi_tile_n=16),
    "1cta-128x128-epi64": _tma(epi_tile_n=64),
}

_WORDS = TMA_DESCRIPTOR_BYTES // 8
_THREADS = 128


def _pattern_value(expert, row):
    """The bf16-exact value expert ``expert`` stores in row ``row`` of a box (0 < v < 256)."""
    return 16 * (expert % 8 + 1) + row % 16


def store_box(config: GemmConfig) -> dict:
    """The TMA box one C store of ``config`` sends: rows, columns, swizzle bytes (the staging
    layout :func:`cutlass.utils.blackwell_helpers.make_smem_layout_epi` picks for the epilogue
    tile's row width) and boxes per epilogue step (2 for the folded 2-CTA 128-row tile)."""
    folded = config.cta_group == 2 and config.cta_tile_m == 64
    cols = config.epi_tile_n // 2 if folded else config.epi_tile_n
    row_bytes = cols * config.dtype_bytes
    swizzle = 128 if row_bytes >= 128 else 64 if row_bytes >= 64 else 32 if row_bytes >= 32 else 0
    return {"rows": config.cta_tile_m, "cols": cols, "swizzle": swizzle, "per_step": 1 + folded}


class DescriptorProbe(PersistentGroupedGemmKernel):
    """Writes each expert's descriptor on the device and stores a pattern through it with the
    C store of the sm_100a persistent kernel of ``config`` (a TMA-store configuration; default
    stage 3's): its epilogue tile (:meth:`_epilogue_tile`), staging layout and TMA store atom
    (:meth:`_make_tma_store_atom`) are the kernel's own.

    ``__call__(c_ptr, offs_ptr, ws_ptr, rows, only_expert, phases, n, experts, stream)``: grid
    ``experts`` CTAs of 128 threads. Workspace slots: ``[0, E)`` the device-patched descriptors,
    ``[E, 2E)`` descriptors encoded on the device (an atom built in the kernel). ``phases``: bit 0
    writes the descriptors, bit 1 stores through them (3: both in one launch, as a test of the
    bytes; 1 then 2: two launches, as the grouped kernels do it). With ``only_expert >= 0`` only
    that expert stores. ``host_encoded(c_ptr, ws_ptr, rows, n, stream)`` writes the host
    encoder's descriptor of a ``(rows, n)`` output at ``c_ptr`` into slot 0 of ``ws_ptr``.
    ``clip=False``: the negative control, descriptors that run from the expert's first row to the
    end of the output, so a partial box spills into the next experts' rows.
    """

    def __init__(self, config: GemmConfig | None = None, clip: bool = True):
        config = (config or STORE_CONFIGS["1cta-128x128"]).resolved()
        if config.epilogue != "tma_store":
            raise ValueError(f"{config.describe()}: the probe checks TMA-store epilogues")
        stage = 3 if config.tile_n <= MAX_MMA_N else 7
        super().__init__(config, B200.sms, stage)
        self.clip = clip
        self.cta_tile = (config.cta_tile_m, config.tile_n)

    def store_atom(self, mC: cute.Tensor):
        """The GEMM's C store for the row-major bf16 output ``mC``: the staging layout exactly as
        the kernel's ``_setup`` makes it, the TMA atom by the kernel's own method. (``_setup``
        itself also builds the tcgen05 MMA, which a Hopper compile cannot.)"""
        self.c_dtype = mC.element_type
        self.c_layout = LayoutEnum.from_tensor(mC)
        self.c_smem_layout = sm100_utils.make_smem_layout_epi(
            self.c_dtype, self.c_layout, self._epilogue_tile(), self.num_epi_buffers
        )
        # for the report (and the CPU check against the GEMM's own), read while tracing
        self.staging_text = str(self.c_smem_layout)
        return self._make_tma_store_atom(mC)

    # ------------------------------------------------------------------ probe
    @cute.jit
    def __call__(
        self,
        c_ptr: cute.Pointer,
        offs_ptr: cute.Pointer,
        ws_ptr: cute.Pointer,
        rows: cutlass.Int32,
        only_expert: cutlass.Int32,
        phases: cutlass.Int32,
        n: cutlass.Constexpr,
        experts: cutlass.Constexpr,
        stream: cuda.CUstream,
    ):
        # (rows, n) row-major output; (E,) end offsets; (2E * 16,) int64 descriptor words
        mC = cute.make_tensor(c_ptr, cute.make_layout((rows, n), stride=(n, 1)))
        mOffs = cute.make_tensor(offs_ptr, cute.make_layout(experts))
        mWs = cute.make_tensor(ws_ptr, cute.make_layout(2 * experts * _WORDS))
        tma_atom, tma_c = self.store_atom(mC)
        self.probe_kernel(
            tma_atom, tma_c, mC, mOffs, mWs, only_expert, phases, self.c_smem_layout
        ).launch(grid=(experts, 1, 1), block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def probe_kernel(
        self,
        tma_atom: cute.CopyAtom,
        tma_c: cute.Tensor,
        mC: cute.Tensor,
        mOffs: cute.Tensor,
        mWs: cute.Tensor,
        only_expert: cutlass.Int32,
        phases: cutlass.Int32,
        c_smem_layout: cute.ComposedLayout,
    ):
        expert, _, _ = cute.arch.block_idx()
        experts = cute.size(mOffs)
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        start, end = scheduler.expert_rows(mOffs, expert, cute.size(mC, mode=[0]))
        rows_e = end - start
        view_rows = rows_e
        if cutlass.const_expr(not self.clip):
            view_rows = cute.size(mC, mode=[0]) - start
        view = expert_output_view(mC, start, view_rows)

        smem = SmemAllocator()
        # (EPI_M, EPI_N, EPI_STAGE): the GEMM's staging buffers
        sC = smem.allocate_tensor(
            self.c_dtype, c_smem_layout.outer, byte_alignment=1024, swizzle=c_smem_layout.inner
        )

        writes = (phases & 1) != 0
        if warp == 0 and writes:
            # the path the grouped kernels use: host descriptor copied, then patched
            write_expert_descriptor(tma_atom, mWs, expert, view)
        if warp == 1 and writes:
            # the path they used before: a descriptor encoded by the device (for the byte report)
            # (the same atom as the store's, from the kernel's staging layout, made on the device)
            device_atom, _ = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), view,
                cute.select(c_smem_layout, mode=[0, 1]), self._epilogue_tile(),
            )  # fmt: skip
            with cute.arch.elect_one():
                cpasync.copy_tensormap(
                    device_atom, descriptor_ptr(mWs, experts + expert, cute.AddressSpace.gmem)
                )
        # the pattern: row r of every staging buffer holds _pattern_value(expert, r)
        epi_m = cute.size(sC, mode=[0])
        epi_n = cute.size(sC, mode=[1])
        for i in range(tidx, cute.size(sC), _THREADS):
            r = i % epi_m
            rest = i // epi_m
            value = cutlass.Float32(_pattern_value(expert, r)).to(self.c_dtype)
            sC[(r, rest % epi_n, rest // epi_n)] = value
        # generic-proxy SMEM writes, read next by the TMA unit (async proxy)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        stores = ((phases & 2) != 0) & ((only_expert < 0) | (only_expert == expert))
        if warp == 0 and stores:
            # as the GEMM's epilogue warp 0 issues them (stage3_persistent, epilogue_tile)
            c_pipeline = pipeline.PipelineTmaStore.create(
                num_stages=self.num_epi_buffers,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
            )
            desc = descriptor_ptr(mWs, expert)
            epi_tile = self._epilogue_tile()
            m_tiles = (rows_e + self.cta_tile[0] - 1) // self.cta_tile[0]
            n_tiles = cute.size(mC, mode=[1]) // self.cta_tile[1]
            stored = cutlass.Int32(0)
            for m_tile in range(m_tiles):
                for n_tile in range(n_tiles):
                    # the whole warp acquires the expert's descriptor before the tile's stores
                    cpasync.fence_tma_desc_acquire(desc)
                    # (cta_tile_m, tile_n): this CTA's tile in the expert's own coordinates
                    gC = cute.local_tile(tma_c, self.cta_tile, (m_tile, n_tile))
                    # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N)
                    gC_epi = cute.flat_divide(gC, epi_tile)
                    # ((ATOM_V, REST_V), EPI_STAGE) and ((ATOM_V, REST_V), EPI_M, EPI_N)
                    bSG_sC, bSG_gC = cpasync.tma_partition(
                        tma_atom, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2),
                        cute.group_modes(gC_epi, 0, 2),
                    )  # fmt: skip
                    bSG_gC = cute.group_modes(bSG_gC, 1, cute.rank(bSG_gC))
                    for subtile in cutlass.range(cute.size(bSG_gC, mode=[1])):
                        buf = (stored + subtile) % self.num_epi_buffers
                        cute.copy(tma_atom, bSG_sC[(None, buf)], bSG_gC[(None, subtile)],
                                  tma_desc_ptr=desc)  # fmt: skip
                        c_pipeline.producer_commit()
                        c_pipeline.producer_acquire()
                    stored = stored + cute.size(bSG_gC, mode=[1])
            c_pipeline.producer_tail()

    # ------------------------------------------------------------------ host encoder's bytes
    @cute.jit
    def host_encoded(
        self,
        c_ptr: cute.Pointer,
        ws_ptr: cute.Pointer,
        rows: cutlass.Int32,
        n: cutlass.Constexpr,
        stream: cuda.CUstream,
    ):
        view = cute.make_tensor(c_ptr, cute.make_layout((rows, n), stride=(n, 1)))
        tma_atom, _ = self.store_atom(view)
        mWs = cute.make_tensor(ws_ptr, cute.make_layout(_WORDS))
        self.copy_kernel(tma_atom, mWs).launch(grid=(1, 1, 1), block=[32, 1, 1], stream=stream)

    @cute.kernel
    def copy_kernel(self, tma_atom: cute.CopyAtom, mWs: cute.Tensor):
        with cute.arch.elect_one():
            cpasync.copy_tensormap(tma_atom, descriptor_ptr(mWs, 0, cute.AddressSpace.gmem))


def _diff(a: bytes, b: bytes) -> list[dict]:
    """The bytes where ``a`` and ``b`` differ: offset and the XOR of the two (the changed bits)."""
    return [
        {"byte": i, "a": x, "b": y, "bits": [8 * i + j for j in range(8) if (x ^ y) >> j & 1]}
        for i, (x, y) in enumerate(zip(a, b, strict=True))
        if x != y
    ]


def _driver_encoded(address: int, rows: int, n: int, box: dict) -> dict:
    """``cuTensorMapEncodeTiled``'s 128 bytes for a ``(rows, n)`` row-major bf16 view with the
    store's box and swizzle (:func:`store_box`), one per L2 promotion (the DSL picks one)."""
    import cuda.bindings.driver as drv

    swizzle = getattr(
        drv.CUtensorMapSwizzle,
        f"CU_TENSOR_MAP_SWIZZLE_{box['swizzle']}B"
        if box["swizzle"]
        else "CU_TENSOR_MAP_SWIZZLE_NONE",
    )
    found = {}
    for promotion in ("NONE", "L2_64B", "L2_128B", "L2_256B"):
        err, tmap = drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, address,
            [drv.cuuint64_t(n), drv.cuuint64_t(rows)], [drv.cuuint64_t(2 * n)],
            [drv.cuuint32_t(box["cols"]), drv.cuuint32_t(box["rows"])], [drv.cuuint32_t(1)] * 2,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{promotion}"),
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )  # fmt: skip
        if err == drv.CUresult.CUDA_SUCCESS:
            found[promotion] = b"".join(int(w).to_bytes(8, "little") for w in tmap.opaque)
    return found


def check_descriptors(
    rows=DEFAULT_ROWS, n: int = DEFAULT_N, config: GemmConfig | str = "1cta-128x128",
    unpatched=False,
) -> dict:  # fmt: skip
    """Run the probe with ``config``'s C store (a name of :data:`STORE_CONFIGS` or a TMA-store
    configuration) on this machine's GPU; returns the report (``report["ok"]``: all checks pass).

    ``rows``: the experts' row counts (zero allowed); ``n``: output columns (a multiple of
    ``tile_n``). ``unpatched=True`` runs the negative control (descriptors that do not end at
    the expert's last row), whose stores must fail. Needs a CUDA GPU of compute capability 9.0
    or 10.x.
    """
    import torch

    from ..kernels.host import bf16_ptr, cuda_stream, i32_ptr, placeholder_ptr

    device = torch.device("cuda")
    name = config if isinstance(config, str) else config.describe()
    config = STORE_CONFIGS[config] if isinstance(config, str) else config
    probe = DescriptorProbe(config, clip=not unpatched)
    box = store_box(probe.config)
    experts = len(rows)
    total = sum(rows)
    stream = cuda_stream(device)
    guard = 2 * probe.cta_tile[0]
    poison = -1.0
    compiled = cute.compile(
        probe,
        placeholder_ptr(),
        placeholder_ptr(cutlass.Int32, 4),
        placeholder_ptr(cutlass.Int64, TMA_DESCRIPTOR_BYTES),
        1, -1, 3, n, experts, cuda.CUstream(0),
    )  # fmt: skip
    compiled_host = cute.compile(
        probe.host_encoded,
        placeholder_ptr(),
        placeholder_ptr(cutlass.Int64, TMA_DESCRIPTOR_BYTES),
        1, n, cuda.CUstream(0),
    )  # fmt: skip

    def bf16_at(t, row):
        return bf16_ptr(t, row * n)

    def starts_of(counts):
        return [sum(counts[:i]) for i in range(len(counts))]

    def launch(buf, counts, ws, only, phases):
        ends = torch.tensor(
            [sum(counts[: i + 1]) for i in range(experts)], dtype=torch.int32, device=device
        )
        compiled(
            bf16_at(buf, guard), i32_ptr(ends), workspace_gmem_ptr(ws), sum(counts), only,
            phases, stream,
        )  # fmt: skip

    def fresh(counts):
        buf = torch.full(
            (guard + sum(counts) + guard, n), poison, dtype=torch.bfloat16, device=device
        )
        ws = torch.zeros(2 * experts * _WORDS, dtype=torch.int64, device=device)
        return buf, ws

    def check(buf, counts, only) -> dict:
        torch.cuda.synchronize()
        rows_total = sum(counts)
        exp = torch.full((rows_total, n), poison, dtype=torch.float32)
        for e, (s, r) in enumerate(zip(starts_of(counts), counts, strict=True)):
            if only in (-1, e) and r:
                vals = torch.tensor([_pattern_value(e, i) for i in range(r)])
                exp[s : s + r] = vals[:, None].float()
        got = buf[guard : guard + rows_total].float().cpu()
        wrong = sorted({int(i) for i in (got != exp).any(dim=1).nonzero().flatten()})
        guard_ok = bool(
            (buf[:guard] == poison).all().item()
            and (buf[guard + rows_total :] == poison).all().item()
        )
        return {"ok": not wrong and guard_ok, "wrong_rows": wrong[:20], "guard_intact": guard_ok}

    report: dict = {
        "config": name,
        "label": probe.config.describe(),
        "box": box,
        "staging": probe.staging_text,
        "rows": list(rows),
        "n": n,
        "tile": list(probe.cta_tile),
        "unpatched_control": unpatched,
        "stores": [],
        "bytes": [],
    }
    # stores: all experts, then each alone (a spill then lands on poisoned rows, never repaired)
    for only in [-1, *range(experts)]:
        buf, ws = fresh(rows)
        launch(buf, rows, ws, only, 3)
        report["stores"].append({"only_expert": only, **check(buf, rows, only)})
    # two launches on a reused workspace, as the grouped kernels do: descriptors of the first
    # offsets, then of other offsets written by one launch and stored through by the next
    other = tuple(reversed(rows))
    buf, ws = fresh(rows)
    launch(buf, rows, ws, -1, 3)
    first = check(buf, rows, -1)
    buf, _ = fresh(other)
    launch(buf, other, ws, -1, 1)
    launch(buf, other, ws, -1, 2)
    report["two_launches"] = {"rows": list(other), "first_ok": first["ok"], **check(buf, other, -1)}
    stores_ok = all(s["ok"] for s in report["stores"]) and report["two_launches"]["ok"]
    stores_ok &= first["ok"]

    # bytes: the patched and device-encoded descriptors of the all-experts run, against the
    # host encoder's for the same (rows_e, n) view (experts with rows only: a view needs a row)
    buf, ws = fresh(rows)
    launch(buf, rows, ws, -1, 3)
    torch.cuda.synchronize()
    words = ws.cpu().view(2, experts, _WORDS)
    one = torch.zeros(_WORDS, dtype=torch.int64, device=device)

    def host_bytes(row0: int, view_rows: int) -> bytes:
        """The DSL host's descriptor, through the same 64-byte copy into a zeroed slot."""
        one.zero_()
        compiled_host(bf16_at(buf, guard + row0), workspace_gmem_ptr(one), view_rows, stream)
        torch.cuda.synchronize()
        return one.cpu().numpy().tobytes()

    def driver_match(row0: int, view_rows: int, slot: bytes) -> dict:
        """For the record, the driver's own 128 bytes for the view (``cuTensorMapEncodeTiled``
        with the L2 promotion closest to the DSL's): the bits where they differ from the slot."""
        try:
            found = _driver_encoded(buf.data_ptr() + (guard + row0) * n * 2, view_rows, n, box)
        except Exception as err:  # an API difference: reported, not a failure of the path
            return {"available": False, "error": f"{type(err).__name__}: {err}"[:300]}
        if not found:
            return {"available": False, "error": "the driver encoded none of the variants"}
        bits = {p: [b for d in _diff(slot, v) for b in d["bits"]] for p, v in found.items()}
        closest = min(bits, key=lambda p: len(bits[p]))
        return {"available": True, "promotion": closest, "bits_vs_slot": bits[closest]}

    # the template every patch starts from: the host's descriptor of the whole output
    template = host_bytes(0, total)
    report["template_hex"] = template.hex()
    report["template_driver"] = driver_match(0, total, template)
    bytes_ok = True
    for e, (s, r) in enumerate(zip(starts_of(rows), rows, strict=True)):
        if r == 0:
            continue
        host = host_bytes(s, r)
        patched = words[0, e].numpy().tobytes()
        encoded = words[1, e].numpy().tobytes()
        diff = _diff(patched, host)
        # a bit the patch did not match must be one the template holds: a field that
        # tensormap.replace leaves alone keeps the value the host encoded for the whole output
        inherited = all(
            (template[d["byte"]] >> (bit % 8) & 1) == (patched[d["byte"]] >> (bit % 8) & 1)
            for d in diff
            for bit in d["bits"]
        )
        driver = driver_match(s, r, host)
        entry = {
            "expert": e,
            "rows": r,
            "patched_vs_host": diff,
            "differences_inherited_from_template": inherited,
            "device_encoded_vs_host": _diff(encoded, host),
            "driver": driver,
            "host_hex": host.hex(),
        }
        bytes_ok &= inherited
        report["bytes"].append(entry)
    # which bits the host encoder changes with the view's size alone (same address): rows of
    # n bf16 columns either side of 64 KiB, 128 KiB and 256 KiB
    sweep = {}
    for kib in (64, 128, 256):
        edge = kib * 1024 // (2 * n)
        for r in (edge - 1, edge, edge + 1):
            if r <= total:
                sweep[r] = host_bytes(0, r)
    base = sweep[min(sweep)] if sweep else b""
    report["size_sweep"] = [
        {
            "rows": r,
            "bytes": r * n * 2,
            "bits_vs_smallest": [b for d in _diff(v, base) for b in d["bits"]],
        }
        for r, v in sorted(sweep.items())
    ]
    report["stores_ok"] = stores_ok
    report["patched_matches_host"] = bytes_ok
    report["ok"] = stores_ok and bytes_ok
    return report


def check_all(configs=None, rows=DEFAULT_ROWS, n: int = DEFAULT_N) -> dict:
    """:func:`check_descriptors` for each C store of :data:`STORE_CONFIGS` (or ``configs``,
    names): ``{"ok": all passed, "reports": [one report per store]}``. A store whose probe fails
    to compile or run is a report with ``ok`` False and the error."""
    reports = []
    for name in configs or STORE_CONFIGS:
        try:
            reports.append(check_descriptors(rows, n, name))
        except Exception as err:
            reports.append({"config": name, "ok": False, "error": f"{type(err).__name__}: {err}"})
    return {"ok": all(r["ok"] for r in reports), "reports": reports}


def format_report(report: dict) -> str:
    """A few lines for a log or ``results/<GPU>/gpu_checks.txt`` (one probe's report, or
    :func:`check_all`'s)."""
    if "reports" in report:
        parts = [format_report(r) for r in report["reports"]]
        verdict = "PASSED" if report["ok"] else "FAILED"
        return "\n".join([*parts, f"descriptor check, every C store: {verdict}"])
    if "error" in report:
        return f"descriptor check {report['config']}: FAILED ({report['error'][:300]})"
    box = report["box"]
    lines = [
        f"descriptor check {report['config']} ({report['label']}): experts of {report['rows']} "
        f"rows, n = {report['n']}, {report['tile'][0]} x {report['tile'][1]} CTA tiles stored "
        f"in {box['rows']} x {box['cols']} boxes ({box['per_step']} a step), "
        f"{box['swizzle']}-byte swizzle"
    ]
    for s in report["stores"]:
        who = "all experts" if s["only_expert"] < 0 else f"expert {s['only_expert']} alone"
        lines.append(
            f"  stores through patched descriptors, {who}: "
            + ("ok" if s["ok"] else f"FAILED rows {s['wrong_rows']} guard {s['guard_intact']}")
        )
    t = report.get("two_launches")
    if t:
        lines.append(
            f"  two launches on a reused workspace (write, then store; experts of {t['rows']} rows "
            f"after {report['rows']}): "
            + ("ok" if t["ok"] and t["first_ok"] else f"FAILED rows {t['wrong_rows']}")
        )
    td = report.get("template_driver", {})
    if td.get("available"):
        lines.append(
            f"  for the record, the driver's cuTensorMapEncodeTiled (L2 promotion "
            f"{td['promotion']}) differs from the slots the DSL host path fills in bits "
            + str(sorted({b for e in [td, *[x["driver"] for x in report["bytes"]]]
                          for b in e.get("bits_vs_slot", [])}))
        )  # fmt: skip
    lines.append(
        f"  template (host's descriptor of all {sum(report['rows'])} rows): "
        f"{report['template_hex'][:48]}..."
    )
    for b in report["bytes"]:
        pd, dd = b["patched_vs_host"], b["device_encoded_vs_host"]
        lines.append(
            f"  expert {b['expert']} ({b['rows']} rows): patched vs host "
            + ("identical (128 bytes)" if not pd else f"{len(pd)} bytes differ, bits "
               f"{[bit for d in pd for bit in d['bits']]}")
            + (" (the template's value)" if pd and b["differences_inherited_from_template"] else "")
            + "; device-encoded vs host "
            + ("identical" if not dd else f"{len(dd)} bytes differ, bits "
               f"{[bit for d in dd for bit in d['bits']]}")
        )  # fmt: skip
    for e in report.get("size_sweep", []):
        lines.append(
            f"  host encoding of {e['rows']} rows ({e['bytes']} B) vs {report['size_sweep'][0]['rows']} "
            f"rows: bits {e['bits_vs_smallest']} differ"
        )
    lines.append(f"descriptor check: {'PASSED' if report['ok'] else 'FAILED'}")
    return "\n".join(lines)

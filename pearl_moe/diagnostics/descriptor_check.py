"""GPU check of the per-expert TMA store descriptors (:mod:`pearl_moe.kernels.sm100.tma_descriptors`).

The sm_100a grouped stages store each expert's tiles through a descriptor that a pre-kernel writes
on the device: a copy of the host-encoded descriptor of the whole output, patched to the expert's
rows with ``tensormap.replace``. A descriptor is the same 128-byte ``CUtensorMap`` on sm_90a and
sm_100a, and the TMA store reads it the same way, so a Hopper GPU can check that path before any
Blackwell GPU runs it. :func:`check_descriptors` runs a small probe kernel (no tensor cores: one
CTA per expert, four warps) for the architecture of the GPU it runs on, and reports:

* **bytes**: for every expert, the device-patched descriptor against the one the DSL's host path
  encodes for the same ``(rows_e, n)`` view (the descriptor a kernel's TMA atom carries, read back
  through the same 64-byte ``copy_tensormap``), and against a descriptor *encoded* on the device (a
  TMA atom built inside the kernel: what the pre-kernel did before), byte by byte; the driver's
  own ``cuTensorMapEncodeTiled`` bytes for the view are recorded beside them;
* **stores**: every expert, alone and all at once, writes a known pattern through its patched
  descriptor in ``tile_m x tile_n`` boxes into a poisoned output inside a guard band. Every row of
  the expert must hold its pattern, and nothing outside the expert's rows may change: the box rows
  past the expert's end must be clipped by the TMA unit. Then as the grouped kernels do it: one
  launch writes the descriptors of new offsets into a workspace that held others, the next
  launch stores through them.

Run it with ``python -m pearl_moe selftest --phases descriptors`` or through the GPU test
``tests/test_tma_descriptors_gpu.py``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.memory import SmemAllocator

from ..kernels import scheduler
from ..kernels.sm100.tma_descriptors import (
    TMA_DESCRIPTOR_BYTES,
    descriptor_ptr,
    expert_output_view,
    workspace_gmem_ptr,
    write_expert_descriptor,
)

__all__ = ["DescriptorProbe", "check_descriptors", "DEFAULT_ROWS"]

#: Expert sizes that stress the descriptor: one row, either side of 16 rows (one field of the
#: device encoder's output changes there), more than three 64-row boxes, and an empty expert.
DEFAULT_ROWS = (1, 15, 16, 200, 0, 37)

_WORDS = TMA_DESCRIPTOR_BYTES // 8
_THREADS = 128


def _pattern_value(expert, row):
    """The bf16-exact value expert ``expert`` stores in row ``row`` of a box (0 < v < 256)."""
    return 16 * (expert % 8 + 1) + row % 16


class DescriptorProbe:
    """Writes each expert's descriptor on the device and stores a pattern through it.

    ``__call__(c_ptr, offs_ptr, ws_ptr, rows, only_expert, phases, n, experts, stream)``: grid
    ``experts`` CTAs of 128 threads. Workspace slots: ``[0, E)`` the device-patched descriptors,
    ``[E, 2E)`` descriptors encoded on the device (an atom built in the kernel). ``phases``: bit 0
    writes the descriptors, bit 1 stores through them (3: both in one launch, as a test of the
    bytes; 1 then 2: two launches, as the grouped kernels do it). With ``only_expert >= 0`` only
    that expert stores.
    ``host_encoded(c_ptr, ws_ptr, rows, n, stream)`` writes the host encoder's descriptor of a
    ``(rows, n)`` output at ``c_ptr`` into slot 0 of ``ws_ptr``.
    """

    def __init__(self, tile_m: int = 64, tile_n: int = 64, clip: bool = True):
        self.tile = (tile_m, tile_n)
        # clip=False: the negative control, descriptors that run from the expert's first row to
        # the end of the output, so a partial box spills into the next experts' rows
        self.clip = clip
        self.c_dtype = cutlass.BFloat16

    def _smem_layout(self):
        # (tile_m, tile_n) bf16, row-major, 128-byte swizzle (tile_n = 64: 128-byte rows), the
        # epilogue buffer's layout in the real kernels
        return cute.make_composed_layout(
            cute.make_swizzle(3, 4, 3),
            0,
            cute.make_layout(self.tile, stride=(self.tile[1], 1)),
        )

    def _store_atom(self, view):
        return cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), view, self._smem_layout(), self.tile
        )

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
        tma_atom, tma_c = self._store_atom(mC)
        self.probe_kernel(tma_atom, tma_c, mC, mOffs, mWs, only_expert, phases).launch(
            grid=(experts, 1, 1), block=[_THREADS, 1, 1], stream=stream
        )

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
        layout = self._smem_layout()
        # (tile_m, tile_n): the box every store sends
        sC = smem.allocate_tensor(self.c_dtype, layout.outer, 1024, layout.inner)

        writes = (phases & 1) != 0
        if warp == 0 and writes:
            # the path the grouped kernels use: host descriptor copied, then patched
            write_expert_descriptor(tma_atom, mWs, expert, view)
        if warp == 1 and writes:
            # the path they used before: a descriptor encoded by the device (for the byte report)
            device_atom, _ = self._store_atom(view)
            with cute.arch.elect_one():
                cpasync.copy_tensormap(
                    device_atom, descriptor_ptr(mWs, experts + expert, cute.AddressSpace.gmem)
                )
        # the pattern: row r of the box holds _pattern_value(expert, r) in every column
        for i in range(tidx, self.tile[0] * self.tile[1], _THREADS):
            r = i // self.tile[1]
            sC[(r, i % self.tile[1])] = cutlass.Float32(_pattern_value(expert, r)).to(self.c_dtype)
        # generic-proxy SMEM writes, read next by the TMA unit (async proxy)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        stores = ((phases & 2) != 0) & ((only_expert < 0) | (only_expert == expert))
        if warp == 0 and stores:
            desc = descriptor_ptr(mWs, expert)
            cpasync.fence_tma_desc_acquire(desc)
            m_tiles = (rows_e + self.tile[0] - 1) // self.tile[0]
            n_tiles = cute.size(mC, mode=[1]) // self.tile[1]
            for m_tile in range(m_tiles):
                for n_tile in range(n_tiles):
                    # (tile_m, tile_n): box (m_tile, n_tile) in the expert's own coordinates
                    gC = cute.local_tile(tma_c, self.tile, (m_tile, n_tile))
                    # (TMA,), (TMA,)
                    tsC, tgC = cpasync.tma_partition(
                        tma_atom, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2),
                        cute.group_modes(gC, 0, 2),
                    )  # fmt: skip
                    with cute.arch.elect_one():
                        cute.copy(tma_atom, tsC, tgC, tma_desc_ptr=desc)
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_commit_group()
                cute.arch.cp_async_bulk_wait_group(0, read=False)

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
        tma_atom, _ = self._store_atom(view)
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


def _driver_encoded(address: int, rows: int, n: int, tile) -> dict:
    """``cuTensorMapEncodeTiled``'s 128 bytes for a ``(rows, n)`` row-major bf16 view with the
    probe's box and 128-byte swizzle, one per L2 promotion (the DSL picks one of them)."""
    import cuda.bindings.driver as drv

    found = {}
    for promotion in ("NONE", "L2_64B", "L2_128B", "L2_256B"):
        err, tmap = drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, address,
            [drv.cuuint64_t(n), drv.cuuint64_t(rows)], [drv.cuuint64_t(2 * n)],
            [drv.cuuint32_t(tile[1]), drv.cuuint32_t(tile[0])], [drv.cuuint32_t(1)] * 2,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{promotion}"),
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )  # fmt: skip
        if err == drv.CUresult.CUDA_SUCCESS:
            found[promotion] = b"".join(int(w).to_bytes(8, "little") for w in tmap.opaque)
    return found


def check_descriptors(rows=DEFAULT_ROWS, n: int = 256, tile=(64, 64), unpatched=False) -> dict:
    """Run the probe on this machine's GPU; returns the report (``report["ok"]``: all checks pass).

    ``rows``: the experts' row counts (zero allowed); ``n``: output columns (a multiple of
    ``tile[1]``). ``unpatched=True`` runs the negative control (descriptors that do not end at
    the expert's last row), whose stores must fail. Needs a CUDA GPU of compute capability 9.0
    or 10.x.
    """
    import torch

    from ..kernels.host import bf16_ptr, cuda_stream, i32_ptr, placeholder_ptr

    device = torch.device("cuda")
    probe = DescriptorProbe(*tile, clip=not unpatched)
    experts = len(rows)
    total = sum(rows)
    stream = cuda_stream(device)
    guard = 2 * tile[0]
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
                vals = torch.tensor([_pattern_value(e, i % tile[0]) for i in range(r)])
                exp[s : s + r] = vals[:, None].float()
        got = buf[guard : guard + rows_total].float().cpu()
        wrong = sorted({int(i) for i in (got != exp).any(dim=1).nonzero().flatten()})
        guard_ok = bool(
            (buf[:guard] == poison).all().item()
            and (buf[guard + rows_total :] == poison).all().item()
        )
        return {"ok": not wrong and guard_ok, "wrong_rows": wrong[:20], "guard_intact": guard_ok}

    report: dict = {
        "rows": list(rows),
        "n": n,
        "tile": list(tile),
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
            found = _driver_encoded(buf.data_ptr() + (guard + row0) * n * 2, view_rows, n, tile)
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


def format_report(report: dict) -> str:
    """A few lines for a log or ``results/<GPU>/gpu_checks.txt``."""
    lines = [
        f"descriptor check: experts of {report['rows']} rows, n = {report['n']}, "
        f"{report['tile'][0]} x {report['tile'][1]} boxes"
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

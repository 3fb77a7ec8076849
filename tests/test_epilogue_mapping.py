"""The sm_90a TMA-store epilogue puts every accumulator value at its own (row, column) (CPU only).

``KernelBase.epilogue_tile`` (``pearl_moe/kernels/sm90/common.py``) stores a tile one slice of
``epi_tile_n`` columns at a time: each consumer thread copies its slice's values out of the
accumulator (seen through the stmatrix copy, ``tRS_rAcc = tiled_copy_r2s.retile(acc)``) into a
small register buffer ``tRS_rC``, and stmatrix writes that buffer to the slice in shared memory.
The copy is pure index arithmetic, so a wrong index silently stores a value in the wrong place.

With one m64 block per thread (64- and 128-row tiles) a slice is a contiguous run of
``tRS_rAcc``: ``tRS_rC[v] = tRS_rAcc[s * slice_size + v]``. A 256-row tile gives each of its two
consumer warpgroups 128 rows, so each thread holds two m64 blocks, and the retiled accumulator
orders their values differently from the slice buffer (block by block across the whole tile, where
the buffer wants column group by column group with both blocks inside each). The kernel therefore
uses ``tRS_rC[v + v_n*(m + m_n*j)] = tRS_rAcc[v + v_n*(s*j_n + j) + per_m*m]`` there.

This test rebuilds, at trace time, the objects the kernel builds (its tiled wgmma, its stmatrix
tiled copy, the shape of its slice buffer) and, for every consumer thread and every slice, compares
the (row, col) of the tile that the accumulator value at the source index holds (the identity
tensor partitioned like the accumulator, then retiled) with the (row, col) the destination index of
``tRS_rC`` is written to (the identity tensor of one slice partitioned like the stmatrix source,
shifted by ``s * epi_tile_n`` columns). The index pairs come from the kernel's own function
(``pearl_moe.kernels.sm90.common.epilogue_slice_copies``, which the kernel unrolls). The plain flat
formula (:func:`flat_copies`) is checked to be wrong for 256-row tiles, so the test can fail.

CuTe DSL reads its compile target (``CUTE_DSL_ARCH``) when ``cutlass`` is first imported, and
building a wgmma needs ``sm_90a``; the check therefore runs in a worker process (this file run as a
script) with ``CUTE_DSL_ARCH=sm_90a``, whatever target the pytest process already imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: (tile_m, tile_n, epi_tile_n): one m64 block per thread (128 rows) and two (256 rows)
CASES = [(128, 128, 32), (128, 256, 32), (256, 128, 32), (256, 192, 32), (256, 128, 64)]


def kernel_copies(s, v_n, m_n, j_n, per_m):
    """(tRS_rC index, tRS_rAcc index) pairs of slice ``s``: the kernel's own function."""
    from pearl_moe.kernels.sm90.common import epilogue_slice_copies

    return epilogue_slice_copies(s, v_n, m_n, j_n, per_m)


def flat_copies(s, v_n, m_n, j_n, per_m):
    """The plain flat index ``tRS_rC[v] = tRS_rAcc[s * slice_size + v]`` (right for m_n == 1)."""
    slice_size = v_n * m_n * j_n
    return [(v, s * slice_size + v) for v in range(slice_size)]


# ------------------------------------------------------------------ worker (CUTE_DSL_ARCH=sm_90a)
def _coords(tensor):
    """The (row, col) tuples of a static coordinate tensor, by flat (colexicographic) index.

    Each index builds an op (about 0.4 ms); :class:`_ThreadCoords` needs it for one thread only.
    """
    import cutlass.cute as cute

    return [tuple(int(x) for x in tensor[i]) for i in range(cute.size(tensor))]


class _ThreadCoords:
    """Coordinates of a per-thread partition for every thread, evaluated in full for a few.

    A static partition for thread ``t`` is ``base_t o layout``: the thread moves the base
    coordinate only, so one thread's coordinates relative to its base, shifted by each thread's
    base (``tensor[0]``), give every thread's. Checked: every thread's layout is the first
    thread's, and the full evaluation of the threads in ``FULL_THREADS`` agrees.
    """

    FULL_THREADS = (0, 37, 127, 128, 201, 255)

    def __init__(self):
        self.layout = self.rel = None

    def __call__(self, tidx, tensor):
        layout = str(tensor.layout)
        base = tuple(int(x) for x in tensor[0])
        if self.layout is None:
            self.layout = layout
            self.rel = [tuple(x - b for x, b in zip(c, base, strict=True)) for c in _coords(tensor)]
        assert layout == self.layout, (tidx, layout, self.layout)
        coords = [tuple(x + b for x, b in zip(r, base, strict=True)) for r in self.rel]
        if tidx in self.FULL_THREADS:
            assert coords == _coords(tensor), tidx
        return coords


def _check(kernel, result):
    """Trace-time check of one kernel configuration (called from inside a ``@cute.jit``)."""
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.tensor_utils import LayoutEnum

    kernel._setup()
    tiled_mma = kernel.tiled_mma
    # the tiled copy exactly as epilogue_tile builds it
    row = LayoutEnum.ROW_MAJOR
    copy_atom_r2s = sm90_utils.sm90_get_smem_store_op(row, kernel.c_dtype, kernel.acc_dtype)
    stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), kernel.c_dtype)
    tiled_copy_r2s = cute.make_tiled_copy_S(
        copy_atom_r2s, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma)
    )
    epi_n = kernel.epi_tile[1]
    slices = kernel.tile_n // epi_n
    # a tensor of sC's layout (tile_m, epi_n, epi_buffers): only its shape is used
    epi_layout = kernel.epi_smem_layout.outer
    sC = cute.make_tensor(cute.make_identity_tensor(cute.size(epi_layout)).iterator, epi_layout)
    tile_coords = cute.make_identity_tensor((kernel.mma_m, kernel.tile_n))
    slice_coords = cute.make_identity_tensor(kernel.epi_tile)

    src_coords, dst_coords = _ThreadCoords(), _ThreadCoords()
    counts = {"kernel": 0, "flat": 0}
    stored, held = [], []
    for tidx in range(kernel.num_mma_threads):
        thr_copy_r2s = tiled_copy_r2s.get_slice(tidx)
        # what acc[i] holds for this thread, seen as tRS_rAcc
        src_t = tiled_copy_r2s.retile(tiled_mma.get_slice(tidx).partition_C(tile_coords))
        # where tRS_rC[i] goes in a slice (tRS_rC has shape partition_S(sC)[:3])
        dst_t = thr_copy_r2s.partition_S(slice_coords)
        rc_shape = cute.shape(thr_copy_r2s.partition_S(sC))[:3]
        assert cute.shape(dst_t) == rc_shape, (cute.shape(dst_t), rc_shape)
        v_n, m_n, j_n = (cute.size(rc_shape, mode=[i]) for i in range(3))
        per_m = cute.size(src_t, mode=[0])
        src, dst = src_coords(tidx, src_t), dst_coords(tidx, dst_t)
        held += src
        for s in range(slices):
            for name, copies in (("kernel", kernel_copies), ("flat", flat_copies)):
                for d, a in copies(s, v_n, m_n, j_n, per_m):
                    r, c = dst[d]
                    if name == "kernel":
                        stored.append((r, c + s * epi_n))
                    counts[name] += (r, c + s * epi_n) != src[a]
    tile = kernel.mma_m * kernel.tile_n
    result.update(
        mismatches=counts["kernel"],
        flat_mismatches=counts["flat"],
        m_blocks=m_n,
        threads=kernel.num_mma_threads,
        values=len(stored),
        # every accumulator value held once, every (row, col) of the tile stored once
        held_once=len(held) == len(set(held)) == tile,
        stored_once=len(stored) == len(set(stored)) == tile,
    )


def _trace(kernel, result):
    """Run :func:`_check` inside a ``@cute.jit`` (ops need its MLIR context) and compile it."""
    import cutlass.cute as cute

    @cute.jit
    def trace():
        _check(kernel, result)  # a plain Python callee: its loops run at trace time, unrewritten

    cute.compile(trace)


def _worker(cases):
    from pearl_moe.config import GemmConfig
    from pearl_moe.kernels.sm90.stage3_persistent import PersistentGroupedGemmKernel

    results = {}
    for tile_m, tile_n, epi_tile_n in cases:
        config = GemmConfig(
            arch="sm_90a", tile_m=tile_m, tile_n=tile_n, tile_k=64, epi_tile_n=epi_tile_n
        ).resolved()
        kernel = PersistentGroupedGemmKernel(config)
        result = {}
        _trace(kernel, result)
        results[f"{tile_m}x{tile_n}/{epi_tile_n}"] = result
    return results


if __name__ == "__main__":
    print("RESULTS=" + json.dumps(_worker(json.loads(sys.argv[1]))))


# ------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def results():
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(CASES)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULTS=")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULTS="))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-epi{c[2]}")
def test_every_value_lands_on_its_coordinate(results, case):
    tile_m, tile_n, epi_tile_n = case
    r = results[f"{tile_m}x{tile_n}/{epi_tile_n}"]
    assert r["m_blocks"] == (2 if tile_m == 256 else 1)
    assert r["threads"] == 256  # two consumer warpgroups
    assert r["mismatches"] == 0, r
    assert r["held_once"] and r["stored_once"], r
    assert r["values"] == tile_m * tile_n


@pytest.mark.parametrize("case", [c for c in CASES if c[0] == 256], ids=lambda c: f"{c[1]}-{c[2]}")
def test_flat_index_is_wrong_for_256_rows(results, case):
    """The check can fail: the plain flat index misplaces values of two m64 blocks."""
    tile_m, tile_n, epi_tile_n = case
    assert results[f"{tile_m}x{tile_n}/{epi_tile_n}"]["flat_mismatches"] > 0


def test_flat_index_is_right_for_one_m_block(results):
    for tile_m, tile_n, epi_tile_n in CASES:
        if tile_m < 256:
            assert results[f"{tile_m}x{tile_n}/{epi_tile_n}"]["flat_mismatches"] == 0

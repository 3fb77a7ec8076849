"""Gathering A's rows through an index on sm_90a (``GemmConfig.gather_a``): ``out[r] = x[a_index[r]] @ W[e]^T``.

An MoE layer's gate+up projection multiplies every routed (token, expert) pair: its A is
``x[token_of_row]``, one row of ``x`` per row of the grouped GEMM. Without this option the layer
writes that copy to memory first (``x.index_select``) and the kernel reads it back by TMA. With it
the kernel reads ``x``'s rows where they are: row ``r`` of the grouped problem is ``x[a_index[r]]``
(``a_index``: int32, one entry per row, values in ``[0, x.shape[0])``).

What changes in the persistent kernel (nothing else does; with ``gather_a=False`` the kernel is
the same, PTX for PTX)
------------------------------------------------------------------------------------------------
* **A by cp.async, B by TMA.** A TMA box is a rectangle of one tensor; gathered rows are not. So
  the whole producer warpgroup (4 warps, 128 threads, idle but for warp 0 until now) copies A:
  16-byte ``cp.async`` per thread into the ring entry. B keeps its TMA copy, issued by one elected
  thread of warp 0, whose ``arrive.expect_tx`` announces B's bytes only.
* **One full barrier, two kinds of arrival.** Each full mbarrier expects ``1 + 128`` arrivals: the
  TMA thread's ``arrive.expect_tx`` (its phase then also waits for B's bytes) and one
  ``cp.async.mbarrier.arrive.noinc`` per producer thread, which fires when all of that thread's
  earlier ``cp.async`` have landed. So the consumers' ``consumer_wait`` is unchanged: an entry is
  full once B's bytes and every thread's A chunks are in. All 128 producer threads wait on the
  entry's empty barrier before writing into it.
* **Cross-proxy fence in the consumers.** ``cp.async`` writes shared memory through the generic
  proxy, wgmma reads it through the async proxy: after ``consumer_wait`` each consumer thread
  issues ``fence.proxy.async.shared::cta`` before its wgmma of that entry (one fence per K tile).
* **Swizzle by layout.** The A entry keeps its 128-byte-swizzled K-major layout (what wgmma
  reads). The cp.async copy is a CuTe tiled copy whose destination is that swizzled tensor: a
  thread's 8 bf16 (16 bytes) are contiguous in a swizzle row, and the layout puts them where the
  swizzle wants them.
* **Rows past the expert's end** (``valid < tile_m``): their index is never read and their chunks
  are not copied (the ``cp.async`` is skipped); the entry keeps whatever it held, the consumers
  compute those accumulator rows and the epilogue drops them (rows are independent in a GEMM).
  **K past k** (``k`` not a multiple of ``tile_k``): the chunks are zero-filled (``cp.async``
  with a source size of 0), as a TMA box is, so that the last K tile adds nothing but zeros.
* The epilogues are untouched: output row ``row0 + r`` is still the tile's row ``r`` (direct
  store and TMA store alike).

Budget arithmetic (tile_k = 64: a K tile of one row is 128 bytes = 8 chunks of 16 bytes)
----------------------------------------------------------------------------------------
* Thread ``t`` (0..127) of the producer warpgroup copies chunk ``t % 8`` of rows ``t / 8 + 16 i``,
  ``i < tile_m / 16``: one pass of the warpgroup covers 16 rows (2 KB), a K tile of A takes
  ``tile_m / 16`` passes: **4 cp.async of 16 bytes per thread per K tile at tile_m = 64, 8 at 128,
  16 at 256.** Eight neighbouring threads read one 128-byte row segment (one L2 sector group).
* Each thread keeps its rows' indices for the whole tile (read once per tile from ``a_index``,
  ``tile_m / 16`` registers; rows past the expert read nothing) and forms the 64-bit addresses
  per K tile.
* Registers: the producer warpgroup gives registers back with ``setmaxnreg.dec`` and keeps 40
  per thread (one thread issues two TMA copies without the gather). With the gather every thread
  holds its ``tile_m / 16`` row indices, their predicates, the 64-bit addresses it forms and the
  pipeline state: at 64 and 128 rows that fits in **40** (compiled for sm_90a: no spills), so
  nothing changes. At 256 rows (16 indices a thread) 40 spill (13 local loads/stores), so the
  producer keeps **56** and the two consumer warpgroups get 224 instead of 232:
  ``128 x 56 + 256 x 224 = 64 512 <= 65 536`` registers of the SM (a 256 x 192 tile's consumer
  holds 192 accumulator registers of them). The compile tests check that none of these spills.
* Shared memory: unchanged (the same A entry, the same barriers): the budget model holds as is.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Int32, Int64

from .common import WARPGROUP_THREADS

__all__ = ["GatherA", "GATHER_PRODUCER_REGISTERS", "GATHER_CONSUMER_REGISTERS"]

#: Registers per thread of the producer warpgroup gathering a 256-row tile (setmaxnreg.dec), and
#: of its two consumer warpgroups (see the budget above); tiles of up to 128 rows keep 40 / 232.
GATHER_PRODUCER_REGISTERS = 56
GATHER_CONSUMER_REGISTERS = 224
#: bf16 elements per 16-byte cp.async
_CHUNK = 8


class GatherA:
    """The producer and consumer halves of A gathered through ``a_index`` (``gather_a=True``)."""

    def _gather_registers(self):
        """``(producer, consumer)`` registers per thread under ``setmaxnreg`` with the gather:
        unchanged up to 128 rows, 56 / 224 for the 16 row indices a thread of a 256-row tile
        keeps."""
        if self.tile_m <= 128:
            return self.producer_registers, self.consumer_registers
        return GATHER_PRODUCER_REGISTERS, GATHER_CONSUMER_REGISTERS

    def _make_gather_copy(self):
        """cp.async, 16 bytes a thread, 128 threads as (16 rows, 8 chunks): one pass is 16 rows of
        one K tile (host side, inside ``__call__``)."""
        atom = cute.make_copy_atom(
            cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.cpasync.LoadCacheMode.GLOBAL),
            self.ab_dtype,
            num_bits_per_copy=_CHUNK * self.ab_dtype.width,
        )
        per_row = self.tile_k // _CHUNK
        threads = cute.make_layout((WARPGROUP_THREADS // per_row, per_row), stride=(per_row, 1))
        return cute.make_tiled_copy_tv(atom, threads, cute.make_layout((1, _CHUNK)))

    def make_gather_pipeline(self, barriers, consumer_warps: int, b_layout):
        """The A/B ring with ``1 + 128`` producer arrivals per full barrier (the B TMA's
        ``arrive.expect_tx`` of B's bytes, and one ``cp.async`` arrival per producer thread)."""
        b_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(b_layout, (None, None, 0)))
        return pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers,
            num_stages=self.ring_depth,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1 + WARPGROUP_THREADS),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_warps),
            tx_count=b_bytes,
            cta_layout_vmnk=self.cluster_layout_vmnk(),
        )

    @cute.jit
    def produce_gather_a(
        self, ab_pipeline, sched, cluster, rank, tiled_copy_a, mX, mIdx, sA, tma_atom_b, mW_nke,
        sB, tidx, warp_idx,
    ):  # fmt: skip
        """The producer warpgroup's loop over this CTA's tiles: per K tile, wait for the entry,
        TMA B (warp 0), cp.async A (all 128 threads), and arrive on the entry's full barrier."""
        ptid = tidx % WARPGROUP_THREADS
        thr_copy = tiled_copy_a.get_slice(ptid)
        # (CPY, tile_m / 16, 1, ring_depth): this thread's 16-byte chunks of every A entry
        tAsA = thr_copy.partition_D(sA)
        # (CPY, tile_m / 16, 1): the (row, column) inside the tile of each of them
        tAcA = thr_copy.partition_D(cute.make_identity_tensor((self.tile_m, self.tile_k)))
        passes = cute.size(tAsA, mode=[1])
        k = cute.size(mX, mode=[1])
        x_base = mX.iterator.toint()
        idx_base = mIdx.iterator.toint()
        row_of = [tAcA[((0, 0), i, 0)][0] for i in range(passes)]
        col = tAcA[((0, 0), 0, 0)][1]
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ring_depth)
        rows_x = cute.make_rmem_tensor(cute.make_layout(passes), Int32)
        tile, expert, first = sched.first_tile(cluster)
        while expert < self.experts:
            m_tile, n_tile, row0, valid = self._cluster_tile(sched, tile, expert, first, rank)
            # this thread's rows of x for the whole tile (rows past the expert: never copied)
            for i in cutlass.range_constexpr(passes):
                rows_x[i] = Int32(0)
                if row_of[i] < valid:
                    rows_x[i] = self._load_index(idx_base, row0 + row_of[i])
            # (tile_n, tile_k, k_tiles) of the expert's weights, and its TMA partition
            gB = cute.local_tile(
                mW_nke[(None, None, expert)], (self.tile_n, self.tile_k), (n_tile, None)
            )
            tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                tma_atom_b, 0, cute.make_layout(1),
                cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
            )  # fmt: skip
            for kt in cutlass.range(self.k_tiles, unroll=1):
                ab_pipeline.sync_object_empty.wait(state.index, state.phase)
                bar = ab_pipeline.producer_get_barrier(state)
                if warp_idx == self.load_warp:
                    # one elected thread: arrive.expect_tx of B's bytes, then B's TMA copy
                    ab_pipeline.sync_object_full.arrive(state.index, None)
                    cute.copy(
                        tma_atom_b, tBgB[(None, kt)], tBsB[(None, state.index)], tma_bar_ptr=bar
                    )
                # k is a multiple of 8: a chunk is wholly inside k or wholly outside (zero fill)
                k0 = kt * self.tile_k + col
                k_src = cutlass.min(k0, k - _CHUNK)  # an address inside the row even outside k
                for i in cutlass.range_constexpr(passes):
                    if row_of[i] < valid:
                        offset = (Int64(rows_x[i]) * k + k_src) * 2
                        src = cute.make_tensor(
                            cute.make_ptr(
                                self.ab_dtype, x_base + offset, cute.AddressSpace.gmem,
                                assumed_align=16,
                            ),
                            cute.make_layout(cute.shape(tAsA[(None, i, 0, 0)])),
                        )  # fmt: skip
                        self._cp_async_16(tiled_copy_a, src, tAsA[(None, i, 0, state.index)], k0, k)
                # fires once this thread's cp.async above have landed (counts as one arrival)
                cute.arch.cp_async_mbarrier_arrive_noinc(bar)
                state.advance()
            tile, expert, first = sched.next_tile(tile, expert, first)
        if warp_idx == self.load_warp:
            ab_pipeline.producer_tail(state)

    @cute.jit
    def _load_index(self, idx_base, row):
        """``a_index[row]`` (int32 in global memory)."""
        ptr = cute.make_ptr(
            Int32, idx_base + Int64(row) * 4, cute.AddressSpace.gmem, assumed_align=4
        )
        return cute.make_tensor(ptr, cute.make_layout(1))[0]

    @cute.jit
    def _cp_async_16(self, tiled_copy_a, src, dst, k0, k):
        """One 16-byte cp.async of columns ``k0 ..``; outside k a zero fill (source size 0), as a
        TMA box pads."""
        pred = cute.make_rmem_tensor(cute.make_layout(1), cutlass.Boolean)
        pred[0] = k0 < k
        cute.copy(tiled_copy_a, src, dst, pred=pred)

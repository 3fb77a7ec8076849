"""Solution: two accumulator slots of one 512-column TMEM buffer, released apart.

The scaffold (``pearl_moe.course.exercises.scaffolds.split_slots``) is a persistent 1-CTA GEMM of
128 x 512 tiles whose accumulator is two 256-wide UMMA atoms, one slot each. Part A: the epilogue
waits for each slot, and releases it right after its last TMEM read, before it waits for the
next. Part B: the MMA warp starts the next tile's atom 0 as soon as the epilogue hands back slot
0, on ring entries it holds; atom 1 catches up on them once slot 1 is free; each slot is committed
through a copy of its own state."""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import tcgen05

from pearl_moe.course.exercises.scaffolds import split_slots as scaffold
from pearl_moe.course.exercises.scaffolds.split_slots import SLOTS, umma


# ---------------------------------------------------------------- part A: the epilogue, one tile
@cute.jit
def drain_tile(acc_pipeline, acc_state, epi):
    per_slot = epi.steps // SLOTS  # 8 steps of 32 columns
    for slot in cutlass.range_constexpr(SLOTS):
        acc_pipeline.consumer_wait(acc_state)  # the MMA warp has committed this slot
        for j in cutlass.range_constexpr(per_slot):
            step = slot * per_slot + j
            epi.load(step)
            if cutlass.const_expr(j == per_slot - 1):
                # the slot's last TMEM read has landed: hand its 256 columns back
                cute.arch.fence_view_async_tmem_load()
                with cute.arch.elect_one():
                    acc_pipeline.consumer_release(acc_state)
                acc_state.advance()
            epi.store(step)
    return acc_state


# ---------------------------------------------------------------- part B: the MMA warp, one tile
@cute.jit
def mma_tile(tiled_mma, ab_consumer, acc_pipeline, acc_state, acc, tCrA, tCrB, k_tiles, hold):
    kblocks = cute.size(tCrA, mode=[2])
    catch_up = ab_consumer.clone()  # where the held entries start: atom 1 walks them again
    # slot 0 (columns 0-255): the epilogue released it first
    acc_pipeline.producer_acquire(acc_state)
    slot0 = acc_state.clone()
    acc_state.advance()
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for _k in cutlass.range(hold, unroll=1):
        entry = ab_consumer.wait_and_advance()  # held, not released: atom 1 reads it too
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 0, kb, entry.index)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
    # slot 1 (columns 256-511): the epilogue may have been draining it until now
    acc_pipeline.producer_acquire(acc_state)
    slot1 = acc_state.clone()
    acc_state.advance()
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for _k in cutlass.range(hold, unroll=1):
        entry = catch_up.current_handle()  # a held entry: no second wait
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 1, kb, entry.index)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        entry.release()  # both atoms have read it
        catch_up.advance()
    for _k in cutlass.range(hold, k_tiles, unroll=1):
        entry = ab_consumer.wait_and_advance()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 0, kb, entry.index)
            umma(tiled_mma, acc, tCrA, tCrB, 1, kb, entry.index)
        entry.release()
    acc_pipeline.producer_commit(slot0)
    acc_pipeline.producer_commit(slot1)
    return tiled_mma, ab_consumer, acc_state


@cute.jit
def host(
    a: cute.Pointer,
    b: cute.Pointer,
    c: cute.Pointer,
    m: cutlass.Int32,
    k: cutlass.Constexpr,
    stream: cuda.CUstream,
):
    scaffold.launch(a, b, c, m, k, stream, mma_tile, drain_tile)


def example_args():
    return scaffold.example_args()

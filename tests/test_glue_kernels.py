"""The layer's Triton glue kernels (routing metadata, weighted combine) on the CPU: run by Triton's
interpreter against the torch versions and a float64 combine, and compiled for sm_90a."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

# Runs in a process of its own: Triton reads TRITON_INTERPRET when the kernels are defined.
INTERPRETED = textwrap.dedent(
    """
    import torch
    from pearl_moe.moe import glue_kernels, route_and_gather, route_topk
    from pearl_moe.moe.layer import combine

    torch.manual_seed(7)
    FIELDS = ("counts", "offsets", "token_of_row", "row_of_slot", "weight_of_row", "topk_ids")
    cases = [
        # tokens, top_k, experts, routing
        (1, 8, 32, "random"), (3, 2, 4, "random"), (16, 8, 256, "random"),
        (32, 8, 16, "random"),    # 256 rows: one chunk of the largest size
        (33, 8, 16, "random"),    # 264 rows: two chunks
        (600, 8, 64, "random"),   # 19 chunks: more than one step of the chunk sums
        (300, 8, 256, "skewed"),  # most rows on two experts, most experts empty
        (50, 6, 20, "bad"),       # ids out of range (unchecked) go after every expert
        (9, 1, 1, "random"), (0, 8, 16, "random"),
    ]
    for tokens, top_k, experts, routing in cases:
        ids = torch.randint(0, experts, (tokens, top_k))
        if routing == "skewed":
            ids = torch.where(torch.rand(tokens, top_k) < 0.9, ids % 2, ids)
        if routing == "bad":  # beyond int32 too: 2**32 + 1 must not pass as expert 1
            ids[0, 0], ids[5, 1], ids[-1, -1] = experts + 3, -1, experts
            ids[7, 2], ids[9, 0] = 2**32 + 1, -(2**32)
        weights = torch.rand(tokens, top_k)
        want = route_topk(ids, weights, experts, check=False, kernels=False)
        for id_dtype in (torch.int64, torch.int32):
            if id_dtype == torch.int32 and routing == "bad":
                continue  # ids beyond int32 have no int32 form
            got = route_topk(ids.to(id_dtype), weights, experts, check=False, kernels=True)
            for field in FIELDS:
                a, b = getattr(want, field), getattr(got, field)
                assert a.dtype == b.dtype and torch.equal(a, b), (tokens, experts, field, a, b)
            # the gathered rows: in the layout's one launch up to 256 rows, and by the kernel
            # at any size when asked; x a column slice of a wider tensor (its own row stride)
            wide = torch.randn(tokens, 300).bfloat16()
            x = wide[:, 3:203]
            got, A = route_and_gather(ids.to(id_dtype), weights, experts, x, check=False,
                                      kernels=True)
            assert torch.equal(A, x[want.token_of_row]), (tokens, experts, "A")
            for field in FIELDS:
                assert torch.equal(getattr(want, field), getattr(got, field)), field
            if tokens * top_k > glue_kernels.BLOCK_ROWS:
                a = glue_kernels.route_rows(ids.to(id_dtype).reshape(-1), weights.reshape(-1),
                                            experts, top_k, x=x)[-1]
                assert torch.equal(a, x[want.token_of_row]), (tokens, experts, "chunks")
        if routing != "bad":
            used = want.counts.sum().item()
            assert used == tokens * top_k and torch.equal(
                torch.sort(ids.reshape(-1), stable=True).values, ids.reshape(-1)[
                    want.row_of_slot.reshape(-1).argsort()]
            )
        # the combine: poisoned rows that no token reads must not leak into the output, nor
        # the rows of masked choices (sorted after every expert, never computed): -1 slots
        hidden = 1100 if tokens <= 64 else 24  # not a multiple of the block (few programs)
        y = torch.randn(tokens * top_k + 3, hidden).bfloat16()
        y[int(want.counts.sum()):] = float("nan")
        assert (want.row_of_slot == -1).sum().item() == (5 if routing == "bad" else 0)
        got = combine(y, want, kernels=True)
        assert got.dtype == torch.bfloat16 and got.shape == (tokens, hidden)
        slots, live = want.row_of_slot.clamp_min(0), (want.row_of_slot >= 0).unsqueeze(-1)
        terms = want.weight_of_row[slots].double().unsqueeze(-1) * y[slots].double()
        exact = torch.where(live, terms, 0.0).sum(1)
        assert torch.isfinite(got).all()
        # one bf16 rounding of the float32 sum (the interpreter truncates to bf16 where a GPU
        # rounds to nearest: one ulp, not half), plus the float32 sum's error
        err = (got.double() - exact).abs()
        assert (err <= exact.abs() * 2.0**-7 + 1e-5).all(), (tokens, experts, err.max())
        assert torch.equal(got, combine(y, want, kernels=True))  # the same bits every call
        if tokens:
            plain = combine(y, want, kernels=False)
            assert ((got.float() - plain.float()).abs() <= plain.float().abs() * 2.0**-6).all()
    print("interpreted: ok", len(cases))
    """
)


def test_the_glue_kernels_match_the_torch_versions_in_the_interpreter():
    """Exactly the torch layout (every field, int32 and int64 ids), over one and several chunks,
    skewed routing with empty experts, one expert, top-1, no tokens and masked ids (out of range,
    their slots -1); the combine within one bf16 rounding of a float64 sum, the same bits on every
    call, poisoned rows nobody reads (those of masked choices too) left out."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "interpreted: ok 10" in done.stdout


COMPILED = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from pearl_moe.moe import _glue_triton as k
    from pearl_moe.moe.glue_kernels import _gather_blocks, _next_pow2

    target = GPUTarget("cuda", 90, 32)
    ROUTE = dict(w_ptr="*fp32", hist_ptr="*i32", base_ptr="*i32", counts_ptr="*i32",
                 offsets_ptr="*i32", token_ptr="*i64", row_of_flat_ptr="*i64",
                 weight_ptr="*fp32", x_ptr="*bf16", a_ptr="*bf16", rows="i32", chunks="i32",
                 top_k="i32", hidden="i32", x_stride="i32")
    CONST = ("E", "BINS", "BLOCK", "STEP", "CSTEP", "SINGLE", "GATHER", "HBLOCK", "CB", "PDL")
    built = 0
    # (experts, rows per chunk, id type, weight type): decode's 16-row chunk with int32 ids and
    # bf16 weights, a count of bins below a warp, E + 2 a power of two, and the largest chunk
    for experts, block, ids, w in ((1, 16, "*i32", "*bf16"), (62, 16, "*i64", "*fp32"),
                                   (8, 256, "*i64", "*fp32"), (256, 256, "*i32", "*fp32")):
        bins = _next_pow2(experts + 2)
        sig = dict(ids_ptr=ids, hist_ptr="*i32", rows="i32", E="constexpr",
                   BINS="constexpr", BLOCK="constexpr")
        src = ASTSource(k.count_chunk, sig, constexprs=dict(E=experts, BINS=bins, BLOCK=block))
        triton.compile(src, target=target); built += 1
        for single in (True, False):  # the one launch gathers x's rows as well
            hblock, cb = _gather_blocks(block, 2048)
            # at decode the layer's routing lets the gate+up GEMM launch at once (it is itself
            # launched in stream order: no wait)
            consts = dict(E=experts, BINS=bins, BLOCK=block, STEP=min(32, block), CSTEP=8,
                          SINGLE=single, GATHER=single, HBLOCK=hblock, CB=cb, PDL=single)
            sig = dict(ROUTE, ids_ptr=ids, w_ptr=w, **{c: "constexpr" for c in CONST})
            kernel = triton.compile(ASTSource(k.place_chunk, sig, constexprs=consts),
                                    target=target)
            ptx = kernel.asm["ptx"]
            wait, go = ptx.find("griddepcontrol.wait"), ptx.find("griddepcontrol.launch_dependents")
            assert wait < 0 and (go >= 0) == single
            assert not single or go < ptx.find("ld.global")
            # the one barrier of the source, between the bases stored and each row's read of its
            # bin's (the PTX has other bar.syncs of Triton's own, so the TTIR is counted)
            ttir = kernel.asm["ttir"]  # (older Tritons spell tl.debug_barrier gpu.barrier)
            assert ttir.count("ttg.barrier") + ttir.count("gpu.barrier") == 1
            built += 1
    sig = dict(y_ptr="*bf16", slot_ptr="*i64", weight_ptr="*fp32", out_ptr="*bf16",
               hidden="i32", TOP_K="constexpr", K_POW2="constexpr", BLOCK="constexpr",
               PDL="constexpr")
    # as Triton specializes a launch on 16-aligned tensors and a hidden size divisible by 16
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    # many tokens; few (one warp), as the layer launches it: waiting for the down GEMM first
    for top_k, block, warps, pdl in ((8, 1024, 4, False), (6, 256, 1, True)):
        consts = dict(TOP_K=top_k, K_POW2=8, BLOCK=block, PDL=pdl)
        src = ASTSource(k.combine, sig, constexprs=consts, attrs=aligned)
        ptx = triton.compile(src, target=target,
                             options=dict(num_warps=warps, launch_pdl=pdl)).asm["ptx"]
        assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx  # 16-byte loads, stores
        wait = ptx.find("griddepcontrol.wait")
        assert (wait >= 0) == pdl and (not pdl or wait < ptx.find("ld.global"))
        built += 1
    print("compiled:", built)
    """
)


def test_the_glue_kernels_compile_for_sm90a():
    """Triton compiles every kernel for the H200 (sm_90, no GPU needed): the placement with its
    barrier, the combine with 16-byte loads."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILED], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "compiled: 14" in done.stdout


def test_the_kernels_refuse_cpu_tensors_outside_the_interpreter():
    """Without TRITON_INTERPRET a CPU tensor gets a clear error, not a Triton driver failure; the
    default (kernels=None) takes the torch versions there."""
    import torch

    from pearl_moe.moe import combine, route_topk

    ids, weights = torch.tensor([[0, 1], [1, 0]]), torch.rand(2, 2)
    with pytest.raises(ValueError, match="CUDA device"):
        route_topk(ids, weights, 2, kernels=True)
    routing = route_topk(ids, weights, 2)
    with pytest.raises(ValueError, match="kernels=False"):
        combine(torch.randn(4, 8).bfloat16(), routing, kernels=True)
    assert combine(torch.randn(4, 8).bfloat16(), routing).shape == (2, 8)

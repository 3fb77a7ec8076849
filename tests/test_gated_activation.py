"""The fused gated activation on the CPU: the weight layout, the epilogue's register mapping
replayed in NumPy, the configuration rules, and the API's checks before any launch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pearl_moe.config import GemmConfig
from pearl_moe.kernels import api, deinterleave_gate_up, interleave_gate_up
from pearl_moe.kernels.ladder import stage_config, stage_problems


def test_interleaving_is_blocks_of_eight_gate_rows_then_eight_up_rows():
    w = torch.arange(2 * 32).reshape(1, 32, 2)[..., 0]  # row r holds 2 r
    v = interleave_gate_up(w.unsqueeze(-1)).squeeze(-1)[0] // 2
    assert v.tolist() == [*range(0, 8), *range(16, 24), *range(8, 16), *range(24, 32)]
    x = torch.randn(3, 48, 5)
    assert torch.equal(deinterleave_gate_up(interleave_gate_up(x)), x)
    with pytest.raises(ValueError, match="multiple of 16"):
        interleave_gate_up(torch.zeros(40, 4))


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _fused_registers(acc_tile, t, tile_n):
    """Thread ``t``'s output registers after ``_gated_words`` (index ``c + 2 h + 4 m``).

    The wgmma leaves register ``c + 2 h + 4 j`` of thread ``t`` (warp ``w``, lane ``l``) at row
    ``16 w + l / 4 + 8 h``, column ``8 j + 2 (l % 4) + c``; the gate of output group ``m`` is in
    group ``j = 2 m``, its up in ``j = 2 m + 1``."""
    warp, lane = divmod(t, 32)
    acc = [acc_tile[16 * warp + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2]
           for i in range(tile_n // 2)]  # fmt: skip
    return [_silu(acc[ch + 4 * 2 * m]) * acc[ch + 4 * (2 * m + 1)]
            for m in range(tile_n // 16) for ch in range(4)]  # fmt: skip


@pytest.mark.parametrize("tile_n", [32, 64, 96, 128, 160, 224, 256])
def test_the_epilogue_register_mapping_stores_silu_of_gate_times_up(tile_n):
    """Replay the sm_90a fused store of one m64 block with the kernel's index arithmetic: the
    registers the wgmma leaves, the gate/up pairing, the quad transpose (lane ``q`` stores the
    words of group ``4 g + q`` that lanes ``p = 0..3`` hold), the store columns, and for widths
    ``32 (2 b + 1)`` the two output groups past the blocks of four, each lane storing its own
    word. The stored tile must be ``silu(x W_gate^T) * (x W_up^T)`` of the ``[gate; up]``
    weight, every output written once."""
    rng = np.random.default_rng(tile_n)
    k, inter = 32, 3 * tile_n // 2  # three n tiles of outputs
    a = rng.standard_normal((64, k))
    w = rng.standard_normal((2 * inter, k)) / k**0.5  # [gate; up]
    w_fused = interleave_gate_up(torch.from_numpy(w)).numpy()
    want = _silu(a @ w[:inter].T) * (a @ w[inter:].T)
    out = np.full((64, inter), np.nan)
    written = np.zeros((64, inter), dtype=int)
    for n_tile in range(2 * inter // tile_n):
        acc_tile = a @ w_fused[n_tile * tile_n : (n_tile + 1) * tile_n].T  # (64, tile_n)
        regs = [_fused_registers(acc_tile, t, tile_n) for t in range(128)]
        for t in range(128):
            warp, lane = divmod(t, 32)
            q = lane % 4
            for h in range(2):
                row = 16 * warp + lane // 4 + 8 * h
                out_tile_n = tile_n // 2
                for g in range(out_tile_n // 32):
                    col = n_tile * out_tile_n + 32 * g + 8 * q
                    word = 2 * (h + 2 * (4 * g + q))  # word (h, 4 g + q) as two bf16 registers
                    for p in range(4):
                        donor = regs[t - q + p]  # lane p of this quad
                        written[row, col + 2 * p : col + 2 * p + 2] += 1
                        out[row, col + 2 * p : col + 2 * p + 2] = donor[word : word + 2]
                for r in range(out_tile_n % 32 // 8):  # the groups past the blocks of four
                    group = 4 * (out_tile_n // 32) + r
                    col = n_tile * out_tile_n + 8 * group + 2 * q
                    word = 2 * (h + 2 * group)
                    written[row, col : col + 2] += 1
                    out[row, col : col + 2] = regs[t][word : word + 2]
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    assert (written == 1).all()


def test_configurations_that_can_fuse_and_those_that_cannot():
    fused = stage_config("sm_90a", 5).with_(activation="swiglu")
    assert fused.describe() == "sm_90a 64x128x64 1cta r* direct swiglu"
    assert GemmConfig.from_label(fused.describe()) == fused
    assert fused.output_columns(4096) == 2048 and stage_config("sm_90a", 5).output_columns(64) == 64
    assert stage_problems(fused, 4) == [] and stage_problems(fused, 3)
    for change, message in (
        (dict(epilogue="tma_store"), "direct_store"),
        (dict(tile_m=16, swap_ab=True), "not with swap_ab"),
        (dict(activation="relu"), "one of"),
    ):
        with pytest.raises(ValueError, match=message):
            fused.with_(**change)
    blackwell = stage_config("sm_100a", 4).with_(activation="swiglu")
    assert not api.can_implement(blackwell, 4, 4096, 64)
    # 64-row tiles give a thread runs of epi_tile_n / 2 columns: with epi_tile_n=16, runs of 8
    # would split a gate block from its up block
    short = stage_config("sm_100a", 5).with_(activation="swiglu", epi_tile_n=16)
    assert any("multiple of 16" in p for p in api.can_implement(short, 5, 4096, 64))
    assert api.can_implement(fused, 4, 4104, 64)  # n = 4104 is not a multiple of 16
    assert not api.can_implement(fused, 4, 4096, 64)
    # the direct store (plain or fused) writes 32-column groups
    assert any("multiple of 32" in p for p in api.can_implement(fused.with_(tile_n=80), 4))


def test_the_default_configuration_is_adapted_to_the_activation():
    swapped = stage_config("sm_90a", 6).with_(tile_m=16, tile_n=128, swap_ab=True,
                                             shift_a_box=True)  # fmt: skip
    adapted = api.with_activation(swapped, "swiglu")
    assert (adapted.swap_ab, adapted.activation, adapted.tile_m) == (False, "swiglu", 16)
    assert adapted.shift_a_box and adapted.epilogue == "direct_store"
    kept = api.with_activation(stage_config("sm_90a", 5).with_(tile_n=96), "geglu")
    assert kept.tile_n == 96 and kept.ring_depth is not None  # sm_90a: multiples of 32
    narrow = api.with_activation(stage_config("sm_90a", 5).with_(tile_n=120), "geglu")
    assert narrow.tile_n == 96
    wide = api.with_activation(stage_config("sm_100a", 5).with_(tile_n=96), "geglu")
    assert wide.tile_n == 64  # sm_100a: multiples of 64
    tma = api.with_activation(stage_config("sm_90a", 3), "swiglu")
    assert tma.epilogue == "direct_store"


def test_the_call_checks_the_activation_before_any_launch():
    A = torch.randn(10, 64).bfloat16()
    W = torch.randn(2, 96, 64).bfloat16()
    offs = torch.tensor([4, 10], dtype=torch.int32)
    rows, n, k, experts, _ = api.validate(A, W, offs, None, True, "cpu", activation="swiglu")
    assert (rows, n) == (10, 96)
    with pytest.raises(ValueError, match=r"out must have shape \(10, 48\)"):
        api.validate(A, W, offs, torch.empty(10, 96).bfloat16(), True, "cpu", activation="swiglu")
    with pytest.raises(ValueError, match="multiple of 16"):
        api.validate(A, torch.randn(2, 88, 64).bfloat16(), offs, None, True, "cpu",
                     activation="swiglu")  # fmt: skip
    with pytest.raises(ValueError, match="activation must be"):
        api.validate(A, W, offs, None, True, "cpu", activation="relu")

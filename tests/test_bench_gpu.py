"""GPU tests of the harness and of every baseline: checked on ragged problems with zero-row experts,
n = 2816 (not a multiple of 256), a single row, and odd k / n for the Triton kernel."""

from __future__ import annotations

import pytest

from pearl_moe.bench import harness
from pearl_moe.workloads import GroupedProblem

pytestmark = pytest.mark.gpu

RAGGED = GroupedProblem(k=512, n=2816, counts=(5, 0, 37, 1, 0, 130, 64, 0), name="ragged n=2816")
ONE_ROW = GroupedProblem(k=256, n=512, counts=(0, 1, 0), name="one row")
ODD = GroupedProblem(k=136, n=200, counts=(3, 0, 17, 1, 0, 40), name="k=136 n=200")
BASELINES = ("loop", "grouped_mm", "quack", "triton")


def _impl(name):
    try:
        return harness.get_impl(name)
    except harness.ImplementationUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("problem", [RAGGED, ONE_ROW, ODD], ids=lambda p: p.name)
@pytest.mark.parametrize("name", BASELINES)
def test_baseline_is_correct(name, problem):
    result, config = harness.check(_impl(name), problem)
    assert result.ok, result.message
    assert result.unwritten_rows == 0
    assert result.torch_bf16_err > 0  # random inputs: torch's bf16 answer is not exact
    assert isinstance(config, dict)


def _broken(skip_expert: int | None = None, wrong_expert: bool = False):
    import torch

    def prepare(A, W, offsets, counts):
        def run(out):
            start = 0
            for e, c in enumerate(counts):
                if c and e != skip_expert:
                    w = W[(e + 1) % W.shape[0]] if wrong_expert else W[e]
                    torch.mm(A[start : start + c], w.t(), out=out[start : start + c])
                start += c
            return out

        return harness.Prepared(run, {})

    return harness.Implementation("broken", prepare)


def test_check_catches_unwritten_rows():
    result, _ = harness.check(_broken(skip_expert=2), RAGGED)
    assert not result.ok
    assert result.unwritten_rows == 37


def test_check_catches_wrong_values():
    result, _ = harness.check(_broken(wrong_expert=True), RAGGED)
    assert not result.ok
    assert result.unwritten_rows == 0
    assert result.max_abs_err > result.tolerance


def test_poison_reaches_fresh_output_of_grouped_mm():
    # grouped_mm returns a new tensor; the check poisons the allocator's block first, so an
    # implementation that returns uninitialized memory for some rows is still caught.
    import torch

    def prepare(A, W, offsets, counts):
        def run(out):
            return torch.empty((A.shape[0], W.shape[1]), dtype=A.dtype, device=A.device)

        return harness.Prepared(run, {}, writes_out=False)

    result, _ = harness.check(harness.Implementation("empty", prepare), RAGGED)
    assert not result.ok
    assert result.unwritten_rows > 0


def test_timing_rotates_inputs_for_small_problems():
    timing, _ = harness.time_impl(_impl("loop"), RAGGED, reps=5, launches=4)
    assert timing.input_sets > 1  # a few MB: must not be timed from L2
    assert timing.launches_per_graph >= timing.input_sets
    assert 0 < timing.min_s <= timing.median_s <= timing.max_s < 0.1


def test_ceilings_are_plausible_for_a_datacenter_gpu():
    c = harness.measure_ceilings(stream_bytes=1 << 30, matmul_n=4096)
    assert 0.5e12 < c["read_bytes_per_s"] < 12e12
    assert 50e12 < c["bf16_flops_per_s"] < 3e15

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.perfmodel import ModelParams, predict
from pearl_moe.workloads import GroupedProblem, make_problem


@pytest.mark.parametrize("tokens", [1, 16, 64, 256, 1024, 4096])
@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_never_faster_than_the_floor(tokens, arch):
    p = make_problem("GLM 5.3", tokens)
    r = predict(p, GemmConfig(arch=arch))
    assert r.seconds > r.floor_seconds and 0 < r.fraction_of_floor < 1
    assert r.label == "modeled"


def test_grouped_launch_beats_the_per_expert_loop_at_decode():
    p = make_problem("GLM 5.3", 64)
    grouped = predict(p, GemmConfig())
    naive = predict(p, GemmConfig(), per_expert_launches=True)
    assert naive.launches == 32 and grouped.launches == 1
    assert naive.seconds > 1.5 * grouped.seconds


def test_more_stages_help_while_bytes_in_flight_limit_bandwidth():
    # One expert with one tile column keeps a few SMs busy: latency, not HBM, is the limit.
    p = GroupedProblem(k=8192, n=1024, counts=(16,))
    slow_memory = ModelParams(memory_latency_s=4e-6)
    times = [
        predict(p, GemmConfig(ring_depth=s), params=slow_memory).seconds for s in (2, 3, 4, 5, 6)
    ]
    assert all(a > b for a, b in zip(times, times[1:], strict=False))
    assert predict(p, GemmConfig(ring_depth=2), params=slow_memory).bound == "latency"


def test_large_batches_are_math_bound():
    r = predict(make_problem("GLM 5.3", 4096), GemmConfig())
    assert r.bound == "math"


def test_empty_problem_costs_one_launch():
    r = predict(GroupedProblem(k=64, n=64, counts=(0, 0)), GemmConfig())
    assert r.waves == 0 and r.seconds == ModelParams().launch_overhead_s

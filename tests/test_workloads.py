import pytest
import torch

from pearl_moe.workloads import (
    MODELS,
    GroupedProblem,
    check_dims,
    check_offsets,
    counts_to_cu_seqlens,
    counts_to_offsets,
    get_model,
    make_problem,
    offsets_to_counts,
    route,
)


def test_glm_decode_matches_the_blog():
    p = make_problem("GLM 5.3", tokens_per_gpu=64, ep=8)
    assert p.experts == 32 and p.rows == 512
    assert set(p.counts) == {16} and (p.k, p.n) == (6144, 4096)


@pytest.mark.parametrize(
    "name, local", [("GLM 5.3", 32), ("DeepSeek V4 Pro", 48), ("Kimi K3", 112)]
)
def test_expert_parallel_split(name, local):
    assert MODELS[name].local_experts(8) == local


def test_model_lookup_and_shapes():
    assert get_model("kimi").name == "Kimi K3"
    assert get_model("v4 pro").name == "DeepSeek V4 Pro"
    assert MODELS["Kimi K3"].shape("down") == (3072, 3584)
    with pytest.raises(ValueError, match="unknown model"):
        get_model("switch-transformer")
    # the public models of the shape sets, by exact or unique partial name
    assert get_model("mixtral-8x22b").name == "Mixtral-8x22B"
    assert get_model("qwen3 235b").shape("gate_up") == (4096, 3072)
    assert get_model("GLM-4.5-Air").shape("down") == (1408, 4096)
    with pytest.raises(ValueError, match="ambiguous: Mixtral-8x7B, Mixtral-8x22B"):
        get_model("mixtral")
    with pytest.raises(ValueError, match="EP degree"):
        MODELS["GLM 5.3"].local_experts(7)
    with pytest.raises(ValueError, match="projection"):
        MODELS["GLM 5.3"].shape("up")


@pytest.mark.parametrize("routing", ["balanced", "random", "skewed"])
@pytest.mark.parametrize("tokens", [0, 1, 7, 64, 1000])
def test_routing_conserves_rows(routing, tokens):
    counts = route(tokens, experts=32, top_k=8, routing=routing, seed=3)
    assert len(counts) == 32 and sum(counts) == tokens * 8 and min(counts) >= 0
    # Each token picks distinct experts, so no expert gets more rows than there are tokens.
    assert max(counts) <= tokens


def test_routing_is_seeded_and_skew_is_skewed():
    assert route(64, 48, 6, "random", seed=1) == route(64, 48, 6, "random", seed=1)
    assert route(64, 48, 6, "random", seed=1) != route(64, 48, 6, "random", seed=2)
    skewed = route(64, 112, 16, "skewed", seed=0)
    balanced = route(64, 112, 16, "balanced")
    assert max(skewed) > 3 * max(balanced)
    assert 0 in route(16, 112, 16, "skewed", seed=0)  # cold experts get no rows


def test_routing_rejects_bad_values():
    with pytest.raises(ValueError, match="top_k"):
        route(4, 8, 9)
    with pytest.raises(ValueError, match="routing"):
        route(4, 8, 2, "zipf")
    with pytest.raises(ValueError, match="non-negative"):
        route(-1, 8, 2)


def test_offsets_in_both_conventions():
    counts = [3, 0, 5, 2]
    assert counts_to_offsets(counts) == [3, 3, 8, 10]
    assert counts_to_cu_seqlens(counts) == [0, 3, 3, 8, 10]
    assert offsets_to_counts([3, 3, 8, 10]) == counts
    assert check_offsets([3, 3, 8, 10], rows=10, experts=4) == [3, 3, 8, 10]
    assert check_offsets([0, 3, 3, 8, 10], rows=10, experts=4) == [3, 3, 8, 10]
    tensor = torch.tensor([3, 3, 8, 10], dtype=torch.int32)
    assert check_offsets(tensor, rows=10) == [3, 3, 8, 10]
    with pytest.raises(ValueError, match="negative"):
        counts_to_offsets([1, -1])


@pytest.mark.parametrize(
    "offsets, rows, experts, message",
    [
        ([3, 2, 8], 8, 3, "not monotone"),
        ([3, 5, 9], 8, 3, "end at row 9"),
        ([3, 5], 8, 3, "expected 3 end offsets"),
        ([], 0, None, "empty"),
        ([1, 0, 3], 3, None, "expert 1 ends at row 0"),
    ],
)
def test_bad_offsets_are_clear_errors(offsets, rows, experts, message):
    with pytest.raises(ValueError, match=message):
        check_offsets(offsets, rows=rows, experts=experts, convention="auto")


def test_cu_seqlens_must_start_at_zero():
    with pytest.raises(ValueError, match="start with 0"):
        check_offsets([1, 3], rows=3, convention="cu_seqlens")


@pytest.mark.parametrize("k, n, message", [(6144, 2820, "multiple of 8"), (0, 8, "positive")])
def test_dims_tma_cannot_address(k, n, message):
    with pytest.raises(ValueError, match=message):
        check_dims(k, n)


def test_problem_bytes_flops_and_floor():
    p = make_problem("GLM 5.3", 64)
    weights = 32 * 4096 * 6144 * 2
    assert p.bytes_moved() == weights + 512 * 6144 * 2 + 512 * 4096 * 2
    assert p.flops == 2 * 512 * 6144 * 4096
    # Decode is memory-bound: the floor is the byte term (facts.md: ~381 us at 4.25 TB/s).
    floor = p.floor_seconds(4.25e12, 790e12)
    assert floor == pytest.approx(p.bytes_moved() / 4.25e12)
    assert floor * 1e6 == pytest.approx(381, abs=1)
    # Experts with no rows cost no weight bytes.
    q = GroupedProblem(k=64, n=64, counts=(0, 4, 0))
    assert q.active_experts == 1 and q.bytes_moved() == 2 * (64 * 64 + 4 * 64 + 4 * 64)


def test_problem_rejects_bad_counts():
    with pytest.raises(ValueError, match="negative"):
        GroupedProblem(k=64, n=64, counts=(1, -2))
    with pytest.raises(ValueError, match="at least one expert"):
        GroupedProblem(k=64, n=64, counts=())

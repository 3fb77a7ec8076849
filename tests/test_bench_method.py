"""The benchmark method on a CPU, with a fake CUDA runtime whose clock drifts: interleaved rounds and
paired ratios recover a 2 % difference that timing one implementation after the other gets wrong;
records keep round medians, spread and the full GemmConfig; the comparison and ablation tables;
committed runs (no rounds) still summarize."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
from fake_cuda import FakeCuda, guard_prepared_state

from pearl_moe.bench import cli, compare, harness, registry
from pearl_moe.results import new_run, read_run, write_run
from pearl_moe.workloads import GroupedProblem

ROOT = Path(__file__).resolve().parent.parent
CEIL = {"read_bytes_per_s": 4.0e12, "bf16_flops_per_s": 800e12}


SMALL = GroupedProblem(
    k=64,
    n=48,
    counts=(5, 0, 7, 1),
    name="small",
    meta={
        "model": "GLM 5.3",
        "tokens_per_gpu": 16,
        "ep": 8,
        "routing": "balanced",
        "projection": "gate_up",
        "seed": 0,
    },
)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_rounds_balance_positions_and_predecessors(n):
    from collections import Counter

    names = [chr(ord("a") + i) for i in range(n)]
    cycle = harness.order_cycle(n)
    rows = [harness.interleaved_order(names, r) for r in range(cycle)]
    assert all(sorted(row) == names for row in rows)
    # every implementation in every position equally often
    for pos in range(n):
        assert len(Counter(row[pos] for row in rows)) == n or n == 1
        assert set(Counter(row[pos] for row in rows).values()) == {cycle // n}
    # every ordered pair (x right before y) equally often: nobody always follows the same one
    pairs = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    if n > 1:
        assert len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1
    assert harness.interleaved_order(names, cycle) == rows[0]
    assert harness.interleaved_order([], 3) == []
    if n >= 3:  # back to back, no implementation ends one round and opens the next
        for r in range(cycle):
            assert rows[r][-1] != rows[(r + 1) % cycle][0]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("cycles", [1, 2])
def test_round_orders_spread_the_hand_overs_between_rounds(n, cycles):
    from collections import Counter

    names = [chr(ord("a") + i) for i in range(n)]
    rounds = harness.order_cycle(n) * cycles
    for start in (0, 3, 12345):
        orders = harness.round_orders(names, rounds, start)
        assert len(orders) == rounds and all(sorted(o) == names for o in orders)
        # the same rows as the Williams design: positions and in-round predecessors balanced
        for pos in range(n):
            assert set(Counter(o[pos] for o in orders).values()) == {rounds // n}
        inside = Counter((o[i], o[i + 1]) for o in orders for i in range(n - 1))
        assert len(set(inside.values())) <= 1
        if n >= 3:  # hand-overs (cyclic): never the same twice in a row, no pair more than needed
            hand = Counter((orders[r][-1], orders[(r + 1) % rounds][0]) for r in range(rounds))
            assert all(a != b for a, b in hand)
            assert max(hand.values()) <= -(-rounds // (n * (n - 1)))
    assert harness.round_orders([], 3) == [[], [], []]


def test_no_implementation_follows_quack_tuned_more_often_than_needed():
    """The compare run of 2026-11-30 15:16 UTC had pearl after quack-tuned in 4 of 10 turns
    (2 inside rounds, 2 at hand-overs); the arranged rounds allow at most one hand-over more."""
    names = ["pearl", "triton", "grouped_mm", "loop", "quack-tuned"]
    for start in range(20):
        orders = harness.round_orders(names, 10, start)
        seq = [name for o in orders for name in o]
        after = {n: sum(seq[i + 1] == n and seq[i] == "quack-tuned" for i in range(len(seq) - 1))
                 for n in names[:-1]}  # fmt: skip
        assert set(after.values()) <= {2, 3}


def test_the_predecessor_changes_from_round_to_round():
    names = ["pearl", "triton", "grouped_mm", "loop", "quack-tuned"]
    before = []
    for r in range(5):
        row = harness.interleaved_order(names, r)
        i = row.index("pearl")
        before.append(row[i - 1] if i else None)
    assert len(set(before)) >= 3  # a plain rotation gives None, then quack-tuned four times


def test_interleaved_paired_ratio_resolves_two_percent_under_drift(monkeypatch):
    # the clock slows down steadily (half a percent per 10 ms of fake time): timing all of A and
    # then all of B would see B several % slower than it is
    fake = FakeCuda(drift=lambda t: 1.0 + 0.5 * t).install(monkeypatch)
    impls = {"a": fake.impl("a", 1.00e-4), "b": fake.impl("b", 1.02e-4)}
    out = harness.time_interleaved(impls, SMALL, rounds=9, reps=5, launches=10, device="cpu")
    ta, ca = out["a"]
    tb, _ = out["b"]
    assert ca == {"seconds": 1.00e-4}
    assert ta.rounds == 9 and len(ta.round_medians_s) == 9 and ta.reps == 45
    assert ta.outputs_ok and tb.outputs_ok  # every input set's output checked after the replays
    assert ta.input_sets > 1 and ta.launches_per_graph >= ta.input_sets
    rec = lambda t: {"time": t.as_dict()}  # noqa: E731
    paired = compare.paired_ratio(rec(tb), rec(ta))
    assert paired["ratio"] == pytest.approx(1.02, abs=0.004)
    # within a round the second one timed pays ~1 % of drift; the rotation cancels it in the mean
    assert paired["hi"] - paired["lo"] < 0.025
    # the same two timed one after the other (the old method) are off by far more than 2 %
    fake.t = 0.0
    seq_a, _ = harness.time_impl(impls["a"], SMALL, reps=45, launches=10, device="cpu")
    seq_b, _ = harness.time_impl(impls["b"], SMALL, reps=45, launches=10, device="cpu")
    assert seq_b.median_s / seq_a.median_s > 1.04
    d = ta.as_dict()
    assert d["rounds"] == 9 and len(d["round_median_us"]) == 9
    assert d["range_pct"] >= d["iqr_pct"] >= 0


def test_each_turn_starts_with_an_untimed_replay(monkeypatch):
    fake = FakeCuda().install(monkeypatch)
    impls = {"a": fake.impl("a", 1e-4), "b": fake.impl("b", 1e-4)}
    harness.time_interleaved(
        impls, SMALL, rounds=2, reps=3, launches=4, device="cpu", first_round=0
    )
    # after capture (2 replays each): a warm-up + 3 timed per impl per round, order a b / b a
    timed = [name for name, _ in fake.replays[4:]]
    assert timed == ["a"] * 4 + ["b"] * 4 + ["b"] * 4 + ["a"] * 4


def test_each_record_says_what_ran_before_it_in_every_round(monkeypatch):
    fake = FakeCuda().install(monkeypatch)
    impls = {name: fake.impl(name, 1e-4) for name in "abc"}
    out = harness.time_interleaved(impls, SMALL, rounds=6, reps=2, launches=4, device="cpu")
    orders = harness.round_orders(list(impls), 6, harness.zlib.crc32(SMALL.name.encode()))
    seq = [name for o in orders for name in o]
    for name, (timing, _) in out.items():
        expected = [seq[i - 1] if i else None for i, x in enumerate(seq) if x == name]
        assert timing.after == expected and timing.as_dict()["after"] == expected


def test_a_failing_implementation_does_not_stop_the_others(monkeypatch):
    fake = FakeCuda().install(monkeypatch)

    def boom(A, W, offsets, counts):
        raise RuntimeError("cannot capture")

    impls = {"a": fake.impl("a", 1e-4), "bad": harness.Implementation("bad", boom)}
    out = harness.time_interleaved(impls, SMALL, rounds=2, reps=2, device="cpu")
    assert isinstance(out["bad"][0], RuntimeError) and out["a"][0].rounds == 2
    checks = harness.check_many(impls, SMALL, device="cpu")
    assert checks["a"][0].ok and isinstance(checks["bad"][0], RuntimeError)


@pytest.fixture
def fake_registry(monkeypatch):
    fake = FakeCuda(drift=lambda t: 1.0 + 0.05 * min(t / 0.02, 1.0)).install(monkeypatch)
    registry.load_providers()  # the real entries first, then the fakes over them
    names = {
        "pearl": 0.97e-4,
        "triton": 1.00e-4,
        "loop": 1.30e-4,
        "quack-tuned": 1.20e-4,
        "pearl-s3": 1.10e-4,
        "pearl-s4": 1.05e-4,
        "pearl-s5": 0.98e-4,
    }
    for name, cost in names.items():
        monkeypatch.setitem(registry.REGISTRY, name, lambda n=name, c=cost: fake.impl(n, c))
    monkeypatch.setitem(registry.REGISTRY, "wrong", lambda: fake.impl("wrong", 0.5e-4, broken=True))
    return fake


def _run_cli_problems(tmp_path, impls, tokens=(1, 64), extra=()):
    args = cli.parse_args(
        ["--models", "glm", "--tokens", ",".join(map(str, tokens)), "--rounds", "5", "--reps", "3"]
        + list(extra)
    )
    problems = [
        GroupedProblem(k=64, n=48, counts=(t, 0, 2 * t, 1), name=f"p{t}", meta=p.meta)
        for t, p in zip(tokens, cli.build_problems(args), strict=True)
    ]
    run = new_run("compare", {"gpu": "NVIDIA H200", "date": "2026-12-01T00:00:00+00:00"}, CEIL)
    run["method"] = cli.method_text(args)
    out = tmp_path / "H200" / "compare.json"
    cli.run_problems(run, problems, cli.load_impls(impls), CEIL, args, out, device="cpu")
    return run, out


def test_cli_problems_compare_table_and_summarize(tmp_path, fake_registry, monkeypatch, capsys):
    run, out = _run_cli_problems(
        tmp_path,
        ["pearl", "triton", "loop", "quack-tuned", "wrong"],
        extra=["--impl-tokens", "quack-tuned=64"],
    )
    statuses = {(r["problem"].split("|")[2], r["impl"]): r["status"] for r in run["records"]}
    assert statuses[("1", "wrong")] == "incorrect" and statuses[("1", "pearl")] == "ok"
    assert ("1", "quack-tuned") not in statuses and statuses[("64", "quack-tuned")] == "ok"
    back = read_run(out)
    rec = next(r for r in back["records"] if r["impl"] == "pearl")
    assert rec["time"]["rounds"] == 5 and len(rec["time"]["round_median_us"]) == 5
    summary = compare.compare_summary(back, ours="pearl")
    assert summary["compared"] == 2 and summary["missing"] == []
    for row in summary["rows"]:
        assert row["best"] == "triton"  # 'wrong' was faster but incorrect: never a baseline
        assert row["ratio"] == pytest.approx(0.97, abs=0.005)
    assert summary["geomean_ratio"] == pytest.approx(0.97, abs=0.005)
    assert summary["decode_vs_quack"]["shapes"] == 1
    assert summary["decode_vs_quack"]["geomean_speedup"] == pytest.approx(1.2 / 0.97, rel=0.01)
    assert summary["ceilings"]["datasheet_read_tb_s"] == pytest.approx(4.8)
    text = compare.format_compare(summary)
    assert "geomean ratio 0.97" in text and "4.80 TB/s" in text and "x faster than" in text
    assert cli.main(["--summarize", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "geomean ratio" in printed and "triton" in printed


def test_ablation_kind_defaults_and_table(tmp_path, fake_registry):
    args = cli.parse_args(["--kind", "ablation"])
    assert args.impls == cli.ABLATION_IMPLS and args.tokens == cli.ABLATION_TOKENS
    assert len(cli.build_problems(args)) == 12  # 3 models x 4 token counts
    run, out = _run_cli_problems(tmp_path, ["pearl-s3", "pearl-s4", "pearl-s5"], tokens=(16, 64))
    summary = compare.ablation_summary(read_run(out))
    assert summary["chain"] == ["pearl-s3", "pearl-s4", "pearl-s5"]
    steps = {(s["from"], s["to"]): s["geomean_ratio"] for s in summary["steps"]}
    assert steps[("pearl-s3", "pearl-s4")] == pytest.approx(1.05 / 1.10, abs=0.005)
    assert steps[("pearl-s4", "pearl-s5")] == pytest.approx(0.98 / 1.05, abs=0.005)
    text = compare.format_ablation(summary)
    assert "pearl-s4 -> pearl-s5" in text


def test_pearl_records_keep_the_full_gemm_config(monkeypatch):
    """The pearl entries record every GemmConfig field (the ablation's configs must be replayable)
    and stage N runs stage N's own course configuration, not stage 3's."""
    import dataclasses

    from pearl_moe.bench import baselines
    from pearl_moe.kernels import api

    calls = []
    kernels = types.SimpleNamespace(
        grouped_gemm=lambda *a, **kw: calls.append(kw), STAGE_NAMES=api.STAGE_NAMES
    )
    monkeypatch.setattr(baselines, "_pearl_kernels", lambda: kernels)
    monkeypatch.setattr(api, "arch_of", lambda device: "sm_90a")
    A, W = torch.zeros(8, 64).bfloat16(), torch.zeros(4, 48, 64).bfloat16()
    for stage in (3, 5, 7):
        prepared = baselines._pearl(stage).prepare(A, W, None, [2, 2, 2, 2])
        expected = api.default_config("sm_90a", stage)
        assert prepared.config["gemm_config"] == dataclasses.asdict(expected)
        assert prepared.config["stage"] == stage
        prepared.run(None)
        assert calls[-1]["stage"] == stage and calls[-1]["config"] == expected
    default = baselines._pearl(None).prepare(A, W, None, [2, 2, 2, 2])
    assert default.config["picked_by"].startswith(("heuristic", "table"))
    assert set(default.config["gemm_config"]) == {
        f.name for f in dataclasses.fields(api.GemmConfig)
    }
    default.run(None)
    assert "stage" not in calls[-1] and "config" not in calls[-1]  # the call users make
    variant = registry.get_impl("pearl-s3:tile_m=64").prepare(A, W, None, [2, 2, 2, 2])
    assert variant.config["gemm_config"]["tile_m"] == 64


def test_committed_runs_still_summarize_without_rounds():
    path = ROOT / "results" / "H200" / "stages.json.gz"
    if not path.exists():
        pytest.skip("no committed stages run")
    run = read_run(path)
    summary = compare.compare_summary(run, ours="pearl-s3")
    assert summary["compared"] >= 18
    assert all(r["rounds"] == 1 and r["lo"] == r["hi"] for r in summary["rows"] if "ratio" in r)
    assert summary["baselines"] == ["loop", "grouped_mm"]
    text = cli.summaries(run, "pearl-s3")
    assert "geomean ratio" in text and "pearl-s1 -> pearl-s2" not in text  # stages >= 3 only


def test_compare_is_stored_with_the_run(tmp_path, fake_registry):
    run, out = _run_cli_problems(tmp_path, ["pearl", "triton"])
    run["compare"] = compare.compare_summary(run)
    write_run(run, out)
    back = json.loads(out.read_text())
    assert back["compare"]["compared"] == 2 and read_run(out)["compare"]["ours"] == "pearl"


def test_default_rounds_are_whole_cycles_of_the_order():
    import types

    from pearl_moe.bench import cli

    auto = types.SimpleNamespace(rounds=None)
    assert [cli.rounds_for(auto, n) for n in (1, 2, 3, 4, 5, 6)] == [6, 6, 6, 8, 10, 6]
    assert cli.rounds_for(types.SimpleNamespace(rounds=7), 5) == 7
    for n in (2, 3, 4, 5, 6):
        assert cli.rounds_for(auto, n) % harness.order_cycle(n) == 0


def test_what_a_prepared_call_allocated_lives_until_its_graph_is_timed(monkeypatch):
    """A CUDA graph holds raw addresses, not tensors: a weight converted or an offsets tensor made
    in ``prepare`` must outlive the capture of the implementations after it (capturing the next
    graph empties the allocator's cache, so a freed block may be unmapped before the replays)."""
    fake = FakeCuda().install(monkeypatch)
    keep = guard_prepared_state(monkeypatch)

    def allocating(name):
        base = fake.impl(name, 1e-4)

        def prepare(A, W, offsets, counts):
            prepared = base.prepare(A, W, offsets, counts)
            scratch = torch.empty(4)  # what only the prepared call holds
            keep(scratch)
            run = prepared.run
            prepared.run = lambda out: (scratch, run(out))[1]
            return prepared

        return registry.Implementation(name, prepare)

    impls = {"a": allocating("a"), "b": allocating("b")}
    out = harness.time_interleaved(impls, SMALL, rounds=2, reps=2, launches=4, device="cpu")
    assert out["a"][0].outputs_ok and out["b"][0].outputs_ok

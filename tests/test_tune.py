"""``python -m pearl_moe tune`` on a CPU: candidates checked and timed with a fake CUDA clock, the
winner written as a table entry that ``autotune.pick`` then returns; precompile requests; refusal
without a GPU."""

from __future__ import annotations

import json
import types

import pytest
import torch
from fake_cuda import FakeCuda

from pearl_moe.bench import cli, harness, tune
from pearl_moe.kernels import autotune
from pearl_moe.workloads import GroupedProblem

META = {
    "model": "Tiny",
    "tokens_per_gpu": 8,
    "ep": 8,
    "routing": "balanced",
    "projection": "gate_up",
    "seed": 0,
}
TINY = GroupedProblem(k=128, n=256, counts=(4, 0, 9, 3, 4, 4, 4, 4), name="tiny", meta=META)


pytestmark = pytest.mark.usefixtures("package_tuning_table")  # tests/conftest.py


def _args(**kw):
    base = dict(limit=16, group_twins=0, rounds=5, reps=3, launches=4, no_merge=False)
    base.update(kw)
    return types.SimpleNamespace(**base)


@pytest.fixture
def fake_candidates(monkeypatch):
    """Candidates cost 100-102 us, except the 16 x 256 tile with A boxes inside A (90 us); 8 x 128
    tiles compute garbage."""
    fake = FakeCuda(drift=lambda t: 1.0 + 0.2 * t).install(monkeypatch)

    def candidate(label, stage, config):
        tile = (config.tile_m, config.tile_n)
        plain = config.acc_slots == 1 and config.b_k_tiles == 1
        fast = tile == (16, 256) and config.shift_a_box and plain
        cost = 0.9e-4 if fast else 1.0e-4 + 1e-8 * config.tile_n
        impl = fake.impl(label, cost, broken=tile == (8, 128))
        prepare = impl.prepare

        def prepare_with_config(A, W, offsets, counts):
            p = prepare(A, W, offsets, counts)
            return harness.Prepared(p.run, {"stage": stage, "config": config.describe()})

        return harness.Implementation(label, prepare_with_config)

    monkeypatch.setattr(tune, "_candidate", candidate)
    return fake


def test_tune_picks_the_fastest_correct_candidate(fake_candidates, tmp_path):
    entry = tune.tune_problem(TINY, "sm_90a", _args(), device="cpu")
    assert (entry["config"]["tile_m"], entry["config"]["tile_n"]) == (16, 256)
    assert entry["config"]["shift_a_box"] and entry["stage"] == 5  # first stage that allows it
    assert entry["bucket"] == autotune.rows_bucket(TINY.rows, 8)
    assert entry["measured_at"] == "Tiny 8 tokens (EP8, balanced)"
    assert entry["median_us"] == pytest.approx(90, rel=0.1)
    # heuristic: 64 x 128 (the fake clock drifts 20% per second; paired rounds keep most of it out)
    assert entry["vs_heuristic"] == pytest.approx(0.9 / 1.0128, abs=0.01)
    times = list(entry["candidates"].values())
    assert times == sorted(times) and len(times) >= 3
    assert any(
        "8x128" in label and why.startswith("incorrect") for label, why in entry["rejected"].items()
    )

    table = tune.new_table("H200", "sm_90a", 132, {"date": "x"})
    table["entries"] = tune.merge_entries([], [entry])
    path = tmp_path / "H200.json"
    tune._write_table(path, table)
    autotune.use_table(path)
    choice = autotune.pick("sm_90a", TINY.n, TINY.k, TINY.experts, TINY.rows, gpu="H200")
    assert (choice.config.tile_m, choice.config.tile_n) == (16, 256)
    assert choice.source == "table H200: Tiny 8 tokens (EP8, balanced)"
    assert json.loads(path.read_text())["entries"][0]["label"].startswith("sm_90a 16x256x64")


def test_merge_replaces_only_the_same_shape():
    old = [
        {"n": 1, "k": 2, "experts": 3, "bucket": 0, "stage": 3, "config": {}, "tag": "old"},
        {"n": 1, "k": 2, "experts": 3, "bucket": 1, "stage": 3, "config": {}, "tag": "keep"},
    ]
    new = [{"n": 1, "k": 2, "experts": 3, "bucket": 0, "stage": 3, "config": {}, "tag": "new"}]
    merged = tune.merge_entries(old, new)
    assert [e["tag"] for e in merged] == ["new", "keep"]


def test_precompile_only_needs_no_gpu(monkeypatch, capsys):
    seen = []

    def precompile(requests, jobs=None, progress=None, timeout=0):
        seen.extend(requests)
        return [{"key": str(i), "ok": True, "cached": False} for i, _ in enumerate(requests)]

    from pearl_moe.kernels import compile_cache

    monkeypatch.setattr(compile_cache, "precompile", precompile)
    monkeypatch.setattr(tune, "_progress", lambda: cli.PlainProgress)  # as without tqdm
    rc = tune.main(
        ["--precompile-only", "--models", "glm", "--tokens", "1,64", "--limit", "3",
         "--with-ablation"]
    )  # fmt: skip
    assert rc == 0
    assert all(r[0] == "sm_90a" and r[-1] == 132 and r[3:6] == (4096, 6144, 32) for r in seen)
    assert len(seen) == len(set(seen)) and len(seen) >= 3  # deduplicated across shapes
    assert '"compiled"' in capsys.readouterr().out


def test_tune_takes_a_users_shape(monkeypatch):
    from pearl_moe.workloads import get_model, make_problem

    args = tune.parse_args(["--shape", "2816,2048,16", "--shape", "1536,4096,64,4",
                            "--tokens", "1,64"])  # fmt: skip
    problems = tune.build_problems(args)  # only the shapes: no course model unless asked
    assert [(p.n, p.k, p.experts, p.rows) for p in problems] == [
        (2816, 2048, 16, 8), (2816, 2048, 16, 512), (1536, 4096, 64, 4), (1536, 4096, 64, 256),
    ]  # fmt: skip
    # the skewed pass rebuilds a problem from its meta: the layer is found again by name
    meta = problems[1].meta
    again = make_problem(meta["model"], 64, meta["ep"], "skewed", meta["projection"])
    assert (again.n, again.k, again.experts, again.rows) == (2816, 2048, 16, 512)
    assert get_model(meta["model"]).top_k == 8
    both = tune.build_problems(tune.parse_args(["--models", "glm", "--shape", "2816,2048,16",
                                                "--tokens", "64"]))  # fmt: skip
    assert [p.meta["model"] for p in both] == ["GLM 5.3", "shape n=2816 k=2048 E=16 top8"]
    assert len(tune.build_problems(tune.parse_args(["--tokens", "64"]))) == 3  # the course models
    for bad in ("2816,2048", "2816,2048,x", "2817,2048,16", "2816,2050,16"):
        with pytest.raises(ValueError):
            tune.build_problems(tune.parse_args(["--shape", bad]))
    assert tune.main(["--precompile-only", "--shape", "2816,2048"]) == 2  # said, no traceback


def test_tune_refuses_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tune.main(["--models", "glm", "--tokens", "64"]) == 2
    assert "precompile-only" in capsys.readouterr().err


def test_main_lists_tune():
    from pearl_moe.__main__ import SUBCOMMANDS

    assert SUBCOMMANDS["tune"][0] == "pearl_moe.bench.tune"


def test_robust_pick_takes_the_best_worst_case_over_routings():
    t = lambda us: types.SimpleNamespace(median_s=us * 1e-6)  # noqa: E731
    balanced = {"small": t(100), "mid": t(101), "big": t(110)}
    skewed = {"small": t(120), "mid": t(103), "big": t(100)}
    # small: worst 1.20 (skewed), mid: worst 1.03, big: worst 1.10 (balanced)
    assert tune._robust_best(balanced, skewed) == "mid"
    assert tune._robust_best(balanced, {}) == "small"


def test_close_candidates_are_timed_again_with_more_rounds(fake_candidates):
    entry = tune.tune_problem(
        TINY, "sm_90a", _args(refine_within=0.2, refine_rounds=3), device="cpu"
    )
    assert (entry["config"]["tile_m"], entry["config"]["tile_n"]) == (16, 256)
    first = entry["refined"]["first_pass"]
    again = entry["candidates"]  # only the finalists, timed in the second pass
    assert entry["refined"]["rounds"] == 3
    assert 1 < len(again) <= 5 < len(first)
    assert set(again) <= set(first) and list(again)[0] == list(first)[0]
    # without the option (the fake's other candidates are 11% slower than the winner) nothing
    # is close enough to need a second pass
    assert "refined" not in tune.tune_problem(TINY, "sm_90a", _args(), device="cpu")


def test_refine_finalists_are_the_close_ones_fastest_first():
    t = lambda us: types.SimpleNamespace(median_s=us * 1e-6)  # noqa: E731
    measured = {"a": t(104), "b": t(100), "c": t(106), "d": t(101)}
    assert tune.refine_finalists(measured, 0.05) == ["b", "d", "a"]
    assert tune.refine_finalists(measured, 0.0) == []
    assert tune.refine_finalists(measured, 0.5, most=2) == ["b", "d"]


def test_tune_takes_a_named_model_and_the_tuning_set_but_never_the_held_out_one(
    monkeypatch, capsys
):
    args = tune.parse_args(["--model", "Mixtral-8x22B", "--ep", "1", "--projection", "both",
                            "--tokens", "1,4096"])  # fmt: skip
    problems = tune.build_problems(args)
    assert [(p.meta["projection"], p.n, p.k, p.experts, p.rows) for p in problems] == [
        ("gate_up", 32768, 6144, 8, 2), ("gate_up", 32768, 6144, 8, 8192),
        ("down", 6144, 16384, 8, 2), ("down", 6144, 16384, 8, 8192),
    ]  # fmt: skip
    assert tune.held_out_problems(problems) == [p.name for p in problems]
    tuning = tune.build_problems(tune.parse_args(["--set", "tuning", "--tokens", "16"]))
    from pearl_moe.bench import shape_sets

    layers = len(shape_sets.cases("tuning", tokens=(16,)))  # one shape per layer
    assert len(tuning) == layers and not tune.held_out_problems(tuning)
    with pytest.raises(SystemExit):
        tune.parse_args(["--set", "held-out"])
    # writing the package's own table from a held-out layer is refused before any GPU work
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("pearl_moe.kernels.api.arch_of", lambda device: "sm_90a")
    monkeypatch.setattr("pearl_moe.kernels.autotune.gpu_name", lambda device=None: "H200")
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: type("P", (), {"multi_processor_count": 132})
    )
    for argv in (["--model", "GLM-4.5-Air"], ["--model", "Qwen3-235B-A22B", "--ep", "4"],
                 ["--model", "Mixtral-8x22B"]):  # fmt: skip
        assert tune.main([*argv, "--tokens", "1"]) == 2
        assert "held-out" in capsys.readouterr().err
    # the course set's skewed 64-token cases are timed inside the balanced entry, not alone
    course = tune.build_problems(tune.parse_args(["--set", "course", "--tokens", "64"]))
    assert [p.meta["routing"] for p in course] == ["balanced"] * 3


def test_tune_refuses_to_merge_into_another_gpus_table(tmp_path, monkeypatch, capsys):
    """On an H100, ``--out`` naming the H200's table (a copy of the package's) is refused before
    any GPU work: merging would drop every entry, since a table belongs to one GPU. A table of the
    running GPU's own, or no file, passes the check."""
    out = tmp_path / "H200.json"
    out.write_text((autotune.TABLE_DIR / "H200.json").read_text())
    assert tune.other_gpus_table(out, "H100") == "H200"
    assert tune.other_gpus_table(out, "H200") is None
    assert tune.other_gpus_table(tmp_path / "missing.json", "H100") is None
    # the same name, another SM count (an H100 PCIe card against the SXM's table): refused too
    pcie = tmp_path / "H100.json"
    pcie.write_text(json.dumps({**json.loads(out.read_text()), "gpu": "H100", "sm_count": 132}))
    assert tune.other_gpus_table(pcie, "H100", 114) == "H100 (132 SMs)"
    assert tune.other_gpus_table(pcie, "H100", 132) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("pearl_moe.kernels.api.arch_of", lambda device: "sm_90a")
    monkeypatch.setattr("pearl_moe.kernels.autotune.gpu_name", lambda device=None: "H100")
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda i: types.SimpleNamespace(multi_processor_count=132),
    )
    before = out.read_bytes()
    assert tune.main(["--models", "glm", "--tokens", "1", "--out", str(out)]) == 2
    assert "holds the H200's table and this GPU is the H100" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_tuning_cut_short_continues_with_the_shapes_the_table_lacks():
    problems = tune.build_problems(tune.parse_args(["--models", "glm", "--tokens", "1,16,64"]))
    table = json.loads((autotune.TABLE_DIR / "H200.json").read_text())
    assert tune.untuned(problems, table) == []  # the committed table holds GLM 5.3 at all three
    table["entries"] = [e for e in table["entries"] if e["bucket"] != 2]  # drop 16 tokens
    assert [p.meta["tokens_per_gpu"] for p in tune.untuned(problems, table)] == [16]
    assert tune.parse_args(["--skip-tuned"]).skip_tuned


def test_a_retuning_continues_with_the_shapes_not_tuned_since_the_candidates_changed():
    """--skip-tuned-since DATE: shapes the table holds but tuned before DATE are tuned again, those
    tuned at or after it are left out (a re-tuning cut short by its deadline continues)."""
    problems = tune.build_problems(tune.parse_args(["--models", "glm", "--tokens", "1,16,64"]))
    table = json.loads((autotune.TABLE_DIR / "H200.json").read_text())
    ours = [e for e in table["entries"] if (e["n"], e["k"], e["experts"]) == (problems[0].n, problems[0].k, problems[0].experts)]  # fmt: skip
    since = "2026-12-06T11:00:00+00:00"
    assert all(e["tuned_at"] < since for e in ours)  # every committed entry predates the change
    assert len(tune.untuned(problems, table, since)) == len(problems) == 3
    for e in ours:
        if e["bucket"] == 2:  # 16 tokens: re-tuned after the change
            e["tuned_at"] = "2026-12-07T09:30:00+00:00"
    assert [p.meta["tokens_per_gpu"] for p in tune.untuned(problems, table, since)] == [1, 64]
    args = tune.parse_args(["--skip-tuned-since", since])
    assert args.skip_tuned_since == since and not args.skip_tuned


def test_compiling_ahead_runs_chunks_in_order_and_stops_at_a_deadline():
    import threading

    started, gate = [], threading.Event()

    def fake_precompile(requests, jobs=None):
        started.append(requests[0])
        if requests[0] == "c1":
            gate.wait(5)  # chunk 1 is slow: a waiter on it blocks until it is done
        return [{"key": r, "ok": r != "bad", "cached": r == "old"} for r in requests]

    ahead = tune.CompileAhead([["c0", "old"], ["c1", "bad"], ["c2"]], precompile=fake_precompile)
    assert [r["key"] for r in ahead.wait(0)] == ["c0", "old"]
    waiter = threading.Thread(target=ahead.wait, args=(1,))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # chunk 1 is still compiling
    gate.set()
    waiter.join(5)
    assert not waiter.is_alive() and ahead.wait(1)[1]["ok"] is False
    ahead.stop()
    summary = ahead.summary()
    assert summary["requests"] >= 4 and summary["failed"] == 1 and summary["cached"] == 1
    # stopped before a chunk started: no compile for it, and a wait on it returns at once
    slow = tune.CompileAhead([["a"], ["b"]], precompile=lambda r, jobs=None: [])
    slow.stop()
    assert slow.wait(1) in (None, [])


def test_the_tune_command_compiles_ahead_and_continues_where_a_table_stopped(monkeypatch, tmp_path):
    """tune's GPU path wired end to end with the GPU work faked: shapes tuned in order, each after
    its chunk was compiled, the table written and extended, shapes already in it skipped."""
    from pearl_moe import results
    from pearl_moe.kernels import api, autotune, compile_cache

    compiled, tuned = [], []

    def precompile(requests, jobs=None, progress=None, timeout=0):
        compiled.append(len(requests))
        return [{"key": str(r), "ok": True, "cached": False} for r in requests]

    def fake_tune(problem, arch, args, device="cuda"):
        assert compiled, "a shape was timed before any kernel was compiled"
        tuned.append(problem.name)
        cfg = autotune.heuristic(arch, problem.n, problem.k, problem.experts, problem.rows)
        return {
            "n": problem.n, "k": problem.k, "experts": problem.experts,
            "bucket": autotune.rows_bucket(problem.rows, problem.experts),
            "rows_per_expert": problem.rows / problem.experts, "stage": cfg.stage,
            "config": {**cfg.config.__dict__}, "label": cfg.config.describe(),
            "measured_at": f"{problem.meta['model']} {problem.meta['tokens_per_gpu']} tokens",
            "candidates": {f"s{cfg.stage} {cfg.config.describe()}": 10.0},
        }  # fmt: skip

    monkeypatch.setattr(compile_cache, "precompile", precompile)
    monkeypatch.setattr(tune, "tune_problem", fake_tune)
    monkeypatch.setattr(tune, "_progress", lambda: cli.PlainProgress)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(api, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(autotune, "gpu_name", lambda device=None: "H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(multi_processor_count=132))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(
        results, "environment", lambda command=None: {"date": "D", "command": command}
    )
    out = tmp_path / "H200.json"
    argv = ["--set", "tuning", "--tokens", "1", "--limit", "3", "--out", str(out), "--skip-tuned"]
    assert tune.main(argv) == 0
    first = json.loads(out.read_text())
    from pearl_moe.bench import shape_sets

    layers = len(shape_sets.cases("tuning", tokens=(1,)))
    chunks = -(-layers // tune.COMPILE_CHUNK)
    assert len(first["entries"]) == len(tuned) == layers
    assert first["env"]["precompile"]["chunks"] == chunks
    assert first["entries"][0]["tuned_with"]["limit"] == 3
    tuned.clear()
    assert tune.main([*argv[:3], "1,16", *argv[4:]]) == 0  # 1 token is in the table: skipped
    again = json.loads(out.read_text())
    assert len(tuned) == layers and len(again["entries"]) == 2 * layers and again["earlier_runs"]


def test_group_twins_reach_the_compile_requests_and_the_parser():
    """``tune --group-twins N`` adds the grouped-order twins at prefill to what is compiled ahead
    (and timed); without it no request has ``n_group``."""
    from pearl_moe.workloads import make_problem

    problem = make_problem("GLM 5.3", 4096, ep=8)
    plain = tune.compile_requests([problem], "sm_90a", 132, limit=20)
    twins = tune.compile_requests([problem], "sm_90a", 132, limit=20, group_twins=3)
    assert not any(r[2].n_group for r in plain)
    assert twins[: len(plain)] == plain and len(twins) == len(plain) + 3
    assert all(r[2].n_group == 8 for r in twins[len(plain) :])
    assert tune.parse_args(["--group-twins", "3"]).group_twins == 3
    assert tune.parse_args([]).group_twins == 0


def test_a_shape_that_fails_is_recorded_and_the_rest_are_tuned(tmp_path, monkeypatch, capsys):
    """A shape whose tuning raises (on the H100, DBRX's gate+up at 8192 tokens ran out of memory)
    leaves no entry and is named in the table's ``env.failed_shapes``; the next shape is tuned."""
    problems = tune.build_problems(tune.parse_args(["--models", "glm", "--tokens", "1,16"]))
    good = json.loads((autotune.TABLE_DIR / "H200.json").read_text())["entries"][0]

    def fake_tune(problem, arch, args, device):
        if problem is problems[0]:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return dict(good)

    monkeypatch.setattr(tune, "tune_problem", fake_tune)
    args = tune.parse_args(["--models", "glm", "--tokens", "1,16"])
    out = tmp_path / "H100.json"
    table = tune.run_tuning(problems, "sm_90a", "H100", 132, args, out, {"date": "d"}, device="cpu")
    assert table["env"]["failed_shapes"] == [
        {"shape": problems[0].name, "error": "OutOfMemoryError: CUDA out of memory"}
    ]
    assert table["env"]["skipped_shapes"] == [] and len(table["entries"]) == 1
    assert json.loads(out.read_text())["env"]["failed_shapes"][0]["shape"] == problems[0].name
    assert "OutOfMemoryError" in capsys.readouterr().out

"""Replay: reading results/ without a GPU."""

from __future__ import annotations

import pytest

from pearl_moe import results
from pearl_moe.bench import harness
from pearl_moe.results import new_run, problem_entry, problem_id, write_run
from pearl_moe.workloads import make_problem

CEIL = {"read_bytes_per_s": 4.0e12, "bf16_flops_per_s": 800e12}


@pytest.fixture
def root(tmp_path):
    run = new_run("baselines", {"gpu": "NVIDIA H200", "date": "2026-11-29T10:00:00+00:00"}, CEIL)
    for model in ("GLM 5.3", "Kimi K3"):
        for tokens in (4, 64):
            p = make_problem(model, tokens, ep=8)
            run["problems"].append(problem_entry(p, CEIL))
            for impl, factor in (("loop", 1.5), ("triton", 1.25)):
                t = factor * p.floor_seconds(**{"read_bytes_per_s": 4e12, "flops_per_s": 800e12})
                run["records"].append(
                    {
                        "problem": problem_id(p),
                        "impl": impl,
                        "status": "ok",
                        "config": {"x": 1},
                        "time": {"median_us": t * 1e6, "min_us": t * 1e6, "max_us": t * 1e6},
                        "metrics": harness.metrics(p, t, CEIL),
                        "correctness": {
                            "ok": True,
                            "max_abs_err": 0.01,
                            "torch_bf16_max_abs_err": 0.01,
                        },
                    }
                )
            run["records"].append(
                {"problem": problem_id(p), "impl": "quack", "status": "error", "config": {}}
            )
    write_run(run, tmp_path / "H200" / "baselines.json")
    return tmp_path


def test_list_runs(root):
    runs = results.list_runs(root)
    assert len(runs) == 1
    assert runs[0]["kind"] == "baselines" and runs[0]["records"] == 12


def test_rows_filter_and_flatten(root):
    rs = results.rows(root=root, model="GLM 5.3", impl="triton")
    assert len(rs) == 2
    assert all(r["pct_of_floor"] == pytest.approx(80.0) for r in rs)
    assert {r["tokens_per_gpu"] for r in rs} == {4, 64}
    assert rs[0]["gpu"] == "NVIDIA H200" and rs[0]["read_ceiling_tb_s"] == pytest.approx(4.0)
    assert len(results.rows(root=root, impl=["loop", "triton"], tokens=64)) == 4
    everything = results.rows(root=root, ok_only=False)
    assert sum(r["status"] == "error" for r in everything) == 4
    assert results.rows(root=root, gpu="B200") == []


def test_best_and_table(root):
    best = results.best_by_problem(results.rows(root=root))
    assert {r["impl"] for r in best.values()} == {"triton"}
    text = results.table(root=root)
    assert "measured on NVIDIA H200 (2026-11-29)" in text
    assert "(80%)" in text and "(67%)" in text and "error" in text


def test_committed_results_replay():
    runs = results.list_runs()
    if not runs:
        pytest.skip("no committed results")
    rs = results.rows(gpu=runs[0]["gpu_dir"], kind=runs[0]["kind"])
    assert rs and all(r["median_us"] > 0 for r in rs)


def test_run_rows_of_one_run(root):
    path = root / "H200" / "baselines.json"
    rs = results.run_rows(path, model="GLM 5.3", impl="loop")
    assert [r["tokens_per_gpu"] for r in rs] == [4, 64] and rs[0]["file"] == str(path)
    assert all(r["correct"] is True for r in rs)
    run = results.load_run(root=root)
    assert len(results.run_rows(run, tokens=64)) == 4 and results.run_rows(run)[0]["file"] is None
    everything = results.run_rows(run, impl="quack", ok_only=False)
    assert len(everything) == 4 and all(r["correct"] is None for r in everything)


def test_every_committed_run_is_consistent_with_its_own_ceilings():
    """For every committed file: the stored bytes and FLOPs are what GroupedProblem computes from
    the counts (weights of experts with rows + A + out), floor = max(bytes / read ceiling, FLOPs /
    bf16 ceiling) of that run, and % of floor = floor / median time."""
    from pearl_moe.results import problem_from_entry

    runs = results.list_runs()
    if not runs:
        pytest.skip("no committed results")
    for info in runs:
        run = results.load_run(info["gpu_dir"], info["kind"])
        read = run["ceilings"]["read_bytes_per_s"]
        flops = run["ceilings"]["bf16_flops_per_s"]
        assert read >= run["ceilings"].get("read_probe_bytes_per_s", read)
        problems = {}
        for entry in run["problems"]:
            p = problem_from_entry(entry)
            assert entry["bytes_moved"] == p.bytes_moved() and entry["flops"] == p.flops
            assert entry["floor_us"] == pytest.approx(
                1e6 * max(p.bytes_moved() / read, p.flops / flops), rel=1e-3
            )
            problems[entry["id"]] = entry
        for rec in run["records"]:
            if rec["status"] != "ok":
                continue
            floor = problems[rec["problem"]]["floor_us"]
            assert rec["metrics"]["floor_us"] == pytest.approx(floor, rel=1e-3)
            pct = 100 * floor / rec["time"]["median_us"]
            assert rec["metrics"]["pct_of_floor"] == pytest.approx(pct, rel=1e-3), info["kind"]
            assert rec["time"]["min_us"] <= rec["time"]["median_us"] <= rec["time"]["max_us"]


def test_the_layer_run_beside_the_bench_runs_is_left_out_of_the_listing(root):
    """results/<gpu>/ also holds the MoE layer's runs (schema pearl-moe-layer/1, written by
    pearl_moe.bench.layer): runs() and list_runs() list the grouped-GEMM runs only, while
    read_run reads either schema, plain or gzipped, each validated by its own rules."""
    from pearl_moe.bench import layer

    problem = layer.LayerProblem("GLM 5.3", 1)
    run = {"schema": results.LAYER_SCHEMA, "kind": "moe_layer",
           "env": {"gpu": "NVIDIA H200", "date": "2026-12-02"},
           "ceilings": {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14},
           "problems": [problem.entry()],
           "records": [{"problem": problem.id, "impl": "torch", "status": "error"}]}  # fmt: skip
    path = results.write_run(run, root / "H200" / "moe_layer.json.gz")  # gzipped, as committed
    assert layer.load_layer_run("H200", root=root) == run  # a valid layer run
    assert results.read_run(path) == run
    assert path in results.run_files(root / "H200")  # a result file of the folder

    listed = list(results.runs("H200", root=root))
    assert [(p.name, r["kind"]) for p, r in listed] == [("baselines.json", "baselines")]
    assert [info["kind"] for info in results.list_runs(root)] == ["baselines"]
    run["schema"] = "pearl-moe-layer/0"
    with pytest.raises(ValueError, match="pearl-moe-bench/1 or pearl-moe-layer/1"):
        results.validate_run(run)
    # named explicitly, it is read (and validated) like any run
    assert [r["kind"] for _, r in results.runs(files=[path])] == ["moe_layer"]

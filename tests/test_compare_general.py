"""The held-out comparison as the README and notebook 09 report it: grouped by tokens per GPU,
with the shapes whose pick changed since the run (CPU, from the committed H200 run)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from pearl_moe.bench.compare import by_tokens, changed_picks, compare_summary
from pearl_moe.kernels import autotune
from pearl_moe.replay import read_run
from pearl_moe.stages import render_general_table

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "results" / "H200" / "compare_general.json.gz"


@pytest.fixture(scope="module")
def run():
    return read_run(RUN)


pytestmark = pytest.mark.usefixtures("package_tuning_table")  # tests/conftest.py


def test_the_token_groups_add_up_to_each_set(run):
    s = compare_summary(run)
    for name, total in s["by_set"].items():
        groups = by_tokens(s, name)
        assert sum(g["compared"] for g in groups) == total["compared"]
        assert sum(sum(g["wins"].values()) for g in groups) == total["compared"]
        assert sorted(p for g in groups for p in g["above_tie"]) == sorted(total["above_tie"])
        assert max(g["worst"]["ratio"] for g in groups) == total["worst"]["ratio"]


def test_a_pick_that_moved_since_the_run_is_named(run):
    edited = copy.deepcopy(run)
    rec = next(r for r in edited["records"] if r["impl"] == "pearl" and r["status"] == "ok")
    now = changed_picks(run)
    assert rec["problem"] not in {c["problem"] for c in now}
    rec["config"]["config"] = "sm_90a 64x64x64 1cta r9 tma"  # a configuration no table picks
    moved = {c["problem"]: c for c in changed_picks(edited)}
    assert moved[rec["problem"]]["timed"] == "sm_90a 64x64x64 1cta r9 tma"
    for c in now:  # what is reported as "now" is what the default call picks
        p = next(p for p in run["problems"] if p["id"] == c["problem"])
        pick = autotune.pick("sm_90a", p["n"], p["k"], p["experts"], p["rows"], "H200")
        assert c["now"] == pick.config.describe() != c["timed"]


def test_the_readme_shows_the_held_out_run_beside_the_course():
    block = render_general_table()
    assert block in (ROOT / "README.md").read_text()
    assert "| held-out | 1 |" in block and "| course |" in block
    assert "results/H200/compare_general.json.gz" in block


def test_without_a_run_the_block_says_so(tmp_path):
    assert "No `compare_general` run recorded" in render_general_table(results_root=tmp_path)


def test_remeasure_changed_drops_exactly_the_problems_whose_pick_moved(run, tmp_path):
    """bench --resume --remeasure-changed: the problems whose default pick changed since they
    were timed leave the run (with all their records), so the next part times them again."""
    import gzip

    from pearl_moe.bench.cli import drop_changed_picks

    path = tmp_path / "compare_general.json"  # as bench --out writes it on the GPU machine
    path.write_bytes(gzip.decompress(RUN.read_bytes()))
    expected = changed_picks(run)
    dropped = drop_changed_picks(path)
    assert dropped == expected
    left = read_run(path)
    gone = {c["problem"] for c in dropped}
    assert len(left["problems"]) == len(run["problems"]) - len(gone)
    assert not gone & {r["problem"] for r in left["records"]}
    kept = [r for r in run["records"] if r["problem"] not in gone]
    assert len(left["records"]) == len(kept)
    assert drop_changed_picks(path) == []  # nothing moved since: nothing more to drop


def test_remeasure_changed_touches_the_file_only_once_the_run_can_be_resumed(
    run, tmp_path, monkeypatch, capsys
):
    """A run of another kind (or GPU) is refused before anything is dropped from it, and
    --remeasure-changed without --resume is refused outright."""
    import gzip

    import torch

    from pearl_moe.bench import cli, records

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(records, "environment",
                        lambda command=None: {"gpu": "NVIDIA H200", "date": "D", "command": command})  # fmt: skip
    path = tmp_path / "compare_general.json"
    path.write_bytes(gzip.decompress(RUN.read_bytes()))
    before = path.read_bytes()
    argv = ["--set", "held-out", "--tokens", "1", "--impls", "pearl,triton", "--out", str(path)]
    assert cli.main([*argv, "--kind", "compare_general", "--remeasure-changed"]) == 2
    assert "give --resume too" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is a 'compare_general' run, not 'compare'"):
        cli.main([*argv, "--kind", "compare", "--resume", "--remeasure-changed"])
    assert path.read_bytes() == before


def test_the_h100s_held_out_run_as_the_readme_quotes_it():
    """The H100's own run (its prefill table, the H200's for the rest): the README's block and the
    figures its prefill paragraph quotes (4096 tokens: geomean 1.018, worst 1.109, seven above the
    tie; no 128 x 128 ping-pong pick; the default call's picks at 77-89% of the floor, quack-tuned
    at 77-91%; the three layers that ran that tile at 61-64% now at 77-83%)."""
    block = render_general_table(gpu="H100")
    assert block in (ROOT / "README.md").read_text()
    assert "results/H100/compare_general.json.gz" in block
    h100 = read_run(ROOT / "results" / "H100" / "compare_general.json.gz")
    assert h100["env"]["gpu"] == "NVIDIA H100 80GB HBM3"
    s = compare_summary(h100)
    assert s["by_set"]["held-out"]["compared"] == 49
    prefill = next(g for g in by_tokens(s, "held-out") if g["tokens"] == 4096)
    assert prefill["compared"] == 20 and len(prefill["above_tie"]) == 7
    assert prefill["geomean_ratio"] == pytest.approx(1.018, abs=5e-4)
    assert prefill["worst"]["ratio"] == pytest.approx(1.109, abs=5e-4)
    assert prefill["worst"]["problem"] == "Qwen2-57B-A14B|gate_up|4096|EP8|balanced"
    share = {}  # (problem, impl) -> % of the floor
    for r in h100["records"]:
        if "|4096|" in r["problem"] and r["status"] == "ok":
            share[r["problem"], r["impl"]] = r["metrics"]["pct_of_floor"] / 100
            if r["impl"] == "pearl":
                assert "128x128x64 1cta r7 direct pingpong" not in r["config"]["config"]
    ours = [v for (p, i), v in share.items() if i == "pearl"]
    tuned = [v for (p, i), v in share.items() if i == "quack-tuned"]
    assert len(ours) == len(tuned) == 20
    assert (round(100 * min(ours)), round(100 * max(ours))) == (77, 89)
    assert (round(100 * min(tuned)), round(100 * max(tuned))) == (77, 91)
    once_collapsed = (  # the three layers of results/H100/prefill_tiles.json.gz
        "Qwen2-57B-A14B|gate_up|4096|EP8|balanced",
        "GLM-4.5-Air|gate_up|4096|EP8|balanced",
        "Qwen3-235B-A22B|gate_up|4096|EP8|balanced",
    )
    assert sorted(round(100 * share[p, "pearl"]) for p in once_collapsed) == [77, 83, 83]

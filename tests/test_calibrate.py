"""``python -m pearl_moe calibrate``: the latency model against every committed H200 measurement."""

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest

from pearl_moe.__main__ import main as cli
from pearl_moe.model import calibrate
from pearl_moe.model.perfmodel import CALIBRATED, CALIBRATED_ON


def _our_ok_records():
    n = 0
    folder = calibrate.RESULTS / "H200"
    for path in sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")]):
        raw = path.read_bytes()
        run = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        n += sum(
            1 for r in run["records"] if r["impl"].startswith("pearl-s") and r["status"] == "ok"
        )
    return n


def test_every_committed_record_of_our_kernels_is_compared():
    records, excluded = calibrate.load_records()
    assert len(records) + len(excluded) == _our_ok_records()
    # every committed record carries its configuration; only retired study variants are left out
    assert len(excluded) == 30
    assert all(why.startswith(calibrate.RETIRED + ": walk='hybrid'") for *_, why in excluded)
    assert {"stages", "stage_sweep"} <= {r.kind for r in records}
    assert {r.stage for r in records} >= {1, 2, 3}


def test_calibrate_prints_every_record_and_a_verdict(capsys):
    rc = cli(["calibrate"])
    out = capsys.readouterr().out
    records, _ = calibrate.load_records()
    table = [line for line in out.splitlines() if re.search(r"[+-]\d+\.\d%  \w+$", line)]
    assert len(table) == len(records)
    for name in calibrate.FITTED:
        assert name in out  # every parameter is printed with where it came from
    summary = calibrate.summary(calibrate.evaluate(records, CALIBRATED))
    assert f"Spearman rho {summary['spearman']:.3f}" in out
    passed = all(c["ok"] for c in calibrate.gate(records, calibrate.evaluate(records, CALIBRATED)))
    assert rc == (0 if passed else 1)
    assert ("PASS" if passed else "FAIL") in out.splitlines()[-1]


def test_the_model_ranks_the_measurements():
    records, _ = calibrate.load_records()
    s = calibrate.summary(calibrate.evaluate(records, CALIBRATED))
    assert s["spearman"] >= calibrate.MIN_SPEARMAN
    # 5.6% since the ablation of 2026-11-30 15:22 (warp-parallel walk) replaced the one the
    # parameters were fitted on (serial walk): the model has no term for what the walk does to
    # the kernel (notebook 09, section 9); 6.1% since tile_shapes.json (2026-11-30 17:36) added
    # 66 records of tile shapes the fit never saw (median 11.8% on those, notebook 04b); 5.9%
    # after a refit with neighbouring CTAs' shared requests on all 314 records; 6.5% since the
    # refit with B boxes merged in groups of four and A boxes not at all (Nsight Compute);
    # 6.1% with the one-call ladder run (158 records measured after that fit); 5.2% after the
    # refit in which neighbours' merging fades as they fall out of step (drift_rounds)
    assert s["median_error"] <= 0.053


def test_tile_shapes_run_is_modeled_as_notebook_04_says():

    path = Path(calibrate.RESULTS) / "H200" / "tile_shapes.json.gz"
    if not path.exists():
        pytest.skip("no committed results/H200/tile_shapes.json.gz")
    every, _ = calibrate.load_records()
    records = [r for r in every if r.source == "tile_shapes.json.gz"]
    assert len(records) == 66
    rows = calibrate.evaluate(records, CALIBRATED)
    s = calibrate.summary(rows)
    assert 0.08 <= s["median_error"] <= 0.085  # "a median error of 8.3%" (11.8% out of sample)
    wide64 = [
        r["error"] for r in rows if r["config"].startswith(("sm_90a 64x192", "sm_90a 64x256"))
    ]
    assert 0.26 <= max(wide64) <= 0.27  # "up to 27% slow"
    narrow = [r["error"] for r in rows if r["config"].startswith(("sm_90a 64x64", "sm_90a 128x64"))]
    assert 0.26 <= max(narrow) <= 0.27  # "up to 27% slow"
    s5 = [r["error"] for r in rows if r["impl"] == "pearl-s5" and "|1024|" in r["problem"]]
    assert 0.115 <= max(s5) <= 0.125  # "12% slow"


def test_where_the_model_misses_as_notebook_04_says():
    """The groups of notebook 04b's "Where it misses", over every record."""
    every, _ = calibrate.load_records()
    rows = calibrate.evaluate(every, CALIBRATED)

    def errors(*prefixes, split=None, wide_b=None, stages=None):
        out = []
        for r in rows:
            c = r["config"]
            if not c.startswith(tuple(f"sm_90a {p}x" for p in prefixes)):
                continue
            if split is not None and ("pingpong" in c) != split:  # the label's word
                continue
            if wide_b is not None and (" B2 " in c) != wide_b:
                continue
            if stages is not None and r["stage"] not in stages:
                continue
            out.append(r["error"])
        return out

    assert 0.26 <= max(errors("64x192", "64x256")) <= 0.27  # "up to 27% slow"
    assert 0.26 <= max(errors("64x64", "128x64")) <= 0.27  # "up to 27%"
    s5 = [r["error"] for r in rows if r["impl"] == "pearl-s5"]
    assert max(s5) <= 0.125 and -0.23 <= min(s5) <= -0.215  # "within 12% slow", "up to 22% fast"
    pp = errors("128x128", split=True, wide_b=True)
    assert -0.125 <= min(pp) <= -0.115 and -0.04 <= max(pp) <= -0.03  # "4-12% fast"
    assert -0.2 <= min(errors("64x128", split=True)) <= -0.19  # "up to 20% fast"
    (s4,) = [
        r["error"]
        for r in rows
        if r["impl"] == "pearl-s4" and r["problem"].startswith("Kimi K3|gate_up|1024|")
    ]
    assert -0.265 <= s4 <= -0.255  # stage 4 at Kimi K3 / 1024 tokens "26% fast"
    ladder = {(r.impl, r.problem.name): r.measured_s for r in every if r.source == "ladder.json.gz"}
    kimi = "Kimi K3|gate_up|1024|EP8|balanced"
    assert (
        round(ladder[("pearl-s4", kimi)] / ladder[("pearl-s3", kimi)], 1) == 1.3
    )  # "1.3x stage 3"
    assert 0.175 <= max(errors("128x128", stages=(1, 2))) <= 0.185  # "up to 18% slow"


def test_drift_fading_as_the_model_says():
    """perfmodel: neighbour_merge 0.86, drift_rounds about 111: stage 5 keeps 87% of its merging on average
    at GLM 5.3 / 1024 tokens (32 rounds), 27% at Kimi K3 / 4096 tokens (408 rounds); without the
    fading (the previous parameters) stage 5 at GLM 5.3 / 1024 tokens was modeled 34% slow."""
    import math

    from pearl_moe.kernels.ladder import stage_config
    from pearl_moe.model.perfmodel import _structure
    from pearl_moe.workloads import make_problem

    assert round(CALIBRATED.neighbour_merge, 2) == 0.86 and round(CALIBRATED.drift_rounds) == 111
    R = CALIBRATED.drift_rounds
    for model, tokens, rounds, kept in (("GLM 5.3", 1024, 32, 0.87), ("Kimi K3", 4096, 408, 0.27)):
        p = make_problem(model, tokens, ep=8)
        cfg = stage_config("sm_90a", 5).resolved()
        (launch,), _, _ = _structure(tuple(p.counts), p.k, p.n, cfg, 5, 132)
        assert sum(launch.values()) == rounds
        assert round(R / rounds * (1 - math.exp(-rounds / R)), 2) == kept
    before = CALIBRATED.with_(
        memory_latency_s=1.432e-6, knee=4.392, l2_per_hbm=30.85, row_request_bytes=2070,
        oob_l2_weight=2.151, shared_box_s=0.01051e-6, cta_overhead_s=0.2817e-6,
        epilogue_s=8.897e-6, neighbour_merge=0.3579, drift_rounds=0.0,
    )  # fmt: skip
    every, _ = calibrate.load_records()
    (rec,) = [
        r
        for r in every
        if r.source == "tile_shapes.json.gz"
        and r.impl == "pearl-s5"
        and r.problem.name.startswith("GLM 5.3|gate_up|1024|")
    ]
    assert round(calibrate.modeled(rec, before).seconds / rec.measured_s - 1, 2) == 0.34
    assert calibrate.modeled(rec, CALIBRATED).seconds / rec.measured_s - 1 < 0.12


def test_errors_by_token_count(capsys):
    """253 records at 1-256 tokens per GPU, largest error 18.1% (median 4.3%, 29 beyond 10%); 189
    at 1024 and 4096 tokens, 26.6% (median 6.8%, 56 beyond); calibrate prints the split per token
    count."""
    every, _ = calibrate.load_records()
    rows = calibrate.evaluate(every, CALIBRATED)
    classes = calibrate.by_tokens(every, rows)
    assert list(classes) == [1, 16, 64, 256, 1024, 4096]
    assert sum(c["records"] for c in classes.values()) == len(every)
    for decode, records, worst, median in ((True, 253, 0.181, 0.043), (False, 189, 0.266, 0.068)):
        sel = [row for r, row in zip(every, rows, strict=True)
               if (r.problem.meta["tokens_per_gpu"] <= 256) == decode]  # fmt: skip
        s = calibrate.summary(sel)
        assert s["records"] == records
        assert round(s["max_error"], 3) == worst and round(s["median_error"], 3) == median
        assert sum(abs(row["error"]) > 0.10 for row in sel) == (29 if decode else 56)
    calibrate.main([])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("  by tokens per GPU: "))
    assert "4096: 102 records, max 26.6%" in line and line.count("records") == 6


def test_calibration_gate(capsys):
    """The model against every committed record, within what the records support: runs of one
    configuration differ by up to 13.5%, so the bounds are per token class (notebook 04b)."""
    assert calibrate.main([]) == 0
    records, _ = calibrate.load_records()
    checks = calibrate.gate(records, calibrate.evaluate(records, CALIBRATED))
    assert [c["name"].split(" (")[0] for c in checks] == [
        "largest error at decode",
        "largest error at prefill",
        "median error",
        "Spearman rank correlation",
    ]
    assert all(c["ok"] for c in checks)
    assert capsys.readouterr().out.splitlines()[-1].startswith("PASS")


def test_calibrate_fails_on_a_regression(monkeypatch, capsys):
    """A model that got worse (an L2 half as fast) fails the gate: exit 1, the missed bound said."""
    worse = dataclasses.replace(CALIBRATED, l2_per_hbm=CALIBRATED.l2_per_hbm / 2)
    monkeypatch.setattr(calibrate, "CALIBRATED", worse)
    assert calibrate.main([]) == 1
    out = capsys.readouterr().out
    assert "MISS" in out and out.splitlines()[-1].startswith("FAIL")


def test_error_floor_of_replicated_measurements():
    """Two runs of one kernel at 100 and 150 us: the best single time, 120 us, misses both by 20%."""
    base = calibrate.load_records()[0][0]
    twins = [
        dataclasses.replace(base, measured_s=100e-6, source="a.json"),
        dataclasses.replace(base, measured_s=150e-6, source="b.json"),
    ]
    other = dataclasses.replace(base, stage=base.stage + 1, measured_s=1e-3)  # not a replicate
    recoded = [dataclasses.replace(t, code="another kernel source") for t in twins[:1]]
    (group,) = calibrate.replicates([*twins, other, *recoded])  # other code: its own group
    assert group["spread"] == pytest.approx(0.5) and group["floor"] == pytest.approx(0.2)
    assert [t for _, _, t in group["runs"]] == [100e-6, 150e-6]
    best = 2 * 100e-6 * 150e-6 / 250e-6
    assert abs(best / 100e-6 - 1) == pytest.approx(calibrate.error_floor([group]))
    assert abs(best / 150e-6 - 1) == pytest.approx(calibrate.error_floor([group]))
    assert calibrate.error_floor([]) == 0.0


def test_committed_replicates_as_the_gate_reason_says(capsys):
    """The gate's reason and notebook 04b: runs of one configuration differ by up to 31.1%
    (stage 6, DeepSeek V4 Pro / 4096 tokens: 3950, 4589, 4932, 5179 us), a floor of 13.5%; the
    model's four times for them within 0.1%; the ladder run, measured after the fit: 25.8%
    largest (stage 4 at Kimi K3 / 1024 tokens), 4.3% median error, 121 of its 158 records'
    kernel-problem pairs also in the fitted runs."""
    records, _ = calibrate.load_records()
    groups = calibrate.replicates(records)
    worst = groups[0]
    assert worst["stage"] == 6 and worst["problem"].startswith("DeepSeek V4 Pro|gate_up|4096|")
    assert [round(t * 1e6) for _, _, t in worst["runs"]] == [3950, 4589, 4932, 5179]
    mine = [
        calibrate.modeled(r, CALIBRATED).seconds
        for r in records
        if (r.source, r.impl, r.measured_s) in set(worst["runs"])
    ]
    assert len(mine) == 4 and max(mine) / min(mine) - 1 < 0.001  # "less than 0.1%"
    assert len(groups) == 139
    assert round(worst["spread"], 3) == 0.311
    assert round(calibrate.error_floor(groups), 3) == 0.135 > calibrate.LISTED_ERROR
    rows = calibrate.evaluate(records, CALIBRATED)
    later = calibrate.summary([r for r in rows if r["kind"] not in CALIBRATED_ON])
    assert later["records"] == 158
    assert round(later["max_error"], 3) == 0.258 and round(later["median_error"], 3) == 0.043
    assert later["worst"]["impl"] == "pearl-s4"
    assert later["worst"]["problem"].startswith("Kimi K3|gate_up|1024|")
    fitted = {calibrate.target(r) for r in records if r.kind in CALIBRATED_ON}
    ladder = [r for r in records if r.kind not in CALIBRATED_ON]
    assert sum(calibrate.target(r) in fitted for r in ladder) == 121
    every = calibrate.summary(rows)
    assert every["records"] == 442 and round(every["max_error"], 3) == 0.266
    assert round(every["median_error"], 3) == 0.052 and round(every["spearman"], 3) == 0.993
    default_rows = calibrate.evaluate(
        calibrate.load_records(impl=calibrate.DEFAULT_CALL)[0], CALIBRATED
    )
    # the default call, configurations never fitted: 11.7% on the course's shapes, 16.4% with the
    # held-out layers (Llama-4-Scout's down at 4096 tokens; 17.8% on Qwen2-57B-A14B's gate+up
    # before the table's 8192-token entries changed its pick)
    course = calibrate.summary([r for r in default_rows if r["kind"] == "compare"])
    default = calibrate.summary(default_rows)
    assert round(course["max_error"], 3) == 0.117 and round(default["max_error"], 3) == 0.164
    assert default["worst"]["problem"].startswith("Llama-4-Scout|down|4096|")
    calibrate.main([])
    out = capsys.readouterr().out
    assert "misses one of them by at least 13.5%" in out and "measured after the fit" in out
    with pytest.raises(SystemExit):
        calibrate.main(["--fit-on", "stages"])  # --fit-on without --fit


def test_fit_holds_the_parameters_asked(monkeypatch, capsys):
    seen = {}

    def fake_fit(records, params, names=None, restarts=3, norm=8):
        seen.update(names=names, restarts=restarts, records=len(records))
        return params, 0.0

    monkeypatch.setattr(calibrate, "fit", fake_fit)
    calibrate.main(["--fit", "--hold", "launch_overhead_s, walk_step_s", "--restarts", "2"])
    assert seen["restarts"] == 2
    assert set(seen["names"]) == set(calibrate.FITTED) - {"launch_overhead_s", "walk_step_s"}
    assert "measured after the fit" not in capsys.readouterr().out  # fitted on every record
    records, _ = calibrate.load_records()
    calibrate.main(["--fit", "--fit-on", ",".join(CALIBRATED_ON)])
    # 314 records when CALIBRATED was fitted, 30 of them of the hybrid walk since retired
    assert seen["records"] == sum(r.kind in CALIBRATED_ON for r in records) == 284
    assert "measured after the fit (ladder, ladder_depth: 158 records" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        calibrate.main(["--fit", "--fit-on", "no_such_kind"])
    with pytest.raises(SystemExit):
        calibrate.main(["--fit", "--hold", "no_such_parameter"])
    capsys.readouterr()


def test_spearman_with_ties():
    assert calibrate.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert calibrate.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert calibrate.spearman([1, 1, 2, 3], [5, 5, 6, 7]) == pytest.approx(1.0)


def test_thresholds_are_options(capsys):
    assert calibrate.main(["--max-error", "0.5", "--min-spearman", "0.5"]) == 0
    assert calibrate.main(["--max-error", "0.001"]) == 1
    assert calibrate.main(["--max-decode-error", "0.10"]) == 1  # 18.1% at decode
    capsys.readouterr()


def test_ablation_records_are_read_and_modeled(tmp_path):
    """Runs of kind 'ablation' (stages 3-7, variants such as pearl-s5:ring_depth=7) need no code
    change: the stage comes from the record, the configuration from config.gemm_config."""
    run = json.loads((calibrate.RESULTS / "H200" / "stage_sweep.json").read_text())
    run["kind"] = "ablation"
    rec = dict(run["records"][-1])
    rec["impl"] = "pearl-s5:ring_depth=7"
    rec["config"] = {
        "stage": 5,
        "gemm_config": dict(
            arch="sm_90a", tile_m=64, tile_n=128, tile_k=64, ring_depth=7,
            epilogue="direct_store", shift_a_box=True,
        ),
    }  # fmt: skip
    broken = dict(rec, impl="pearl-s6", config={"stage": 6})  # no configuration recorded
    run["records"] = [rec, broken]
    (tmp_path / "H200").mkdir()
    (tmp_path / "H200" / "ablation.json").write_text(json.dumps(run))
    records, excluded = calibrate.load_records(root=tmp_path)
    assert [(r.kind, r.impl, r.stage) for r in records] == [
        ("ablation", "pearl-s5:ring_depth=7", 5)
    ]
    assert records[0].config.shift_a_box and records[0].config.epilogue == "direct_store"
    assert len(excluded) == 1 and "no gemm_config" in excluded[0][3]
    (row,) = calibrate.evaluate(records)
    assert row["modeled_s"] > 0 and row["stage"] == 5


def test_each_run_says_which_scheduler_walk_it_measured():
    from pearl_moe.results import SCHEDULER, environment, run_scheduler

    records, _ = calibrate.load_records()
    # runs before the warp-parallel walk (2026-11-30 11:46 UTC) measured the serial walk
    walks = {r.kind: r.scheduler for r in records if "walk=" not in r.impl}
    assert walks["stages"] == walks["stage_sweep"] == "serial"
    assert walks.get("probe", "warp-parallel") == walks["ablation"] == "warp-parallel"
    # a configuration that names its walk (GemmConfig.walk) overrides its run's
    named = [r for r in records if "walk=" in r.impl]
    assert all(r.scheduler == r.impl.split("walk=")[1].split("+")[0] for r in named)
    dated = {"env": {"date": "2026-11-30T12:00:00+00:00"}}
    assert run_scheduler(dated)[0] == "warp-parallel"
    assert run_scheduler({"env": {"date": "2026-11-29T14:00:00+00:00"}})[0] == "serial"
    recorded = {"env": {"date": "2026-11-29T14:00:00+00:00", "scheduler": "warp-parallel"}}
    assert run_scheduler(recorded) == ("warp-parallel", "recorded in env.scheduler")
    assert environment("test")["scheduler"] == SCHEDULER == "warp-parallel"


def test_the_default_call_is_printed_out_of_sample(capsys):
    rc = calibrate.main([])
    out = capsys.readouterr().out
    default, _ = calibrate.load_records(impl=calibrate.DEFAULT_CALL)
    if not default:
        pytest.skip("no committed run of the default call")
    assert "out of sample, not in the gate" in out
    assert rc in (0, 1)
    gate_records, _ = calibrate.load_records()
    assert not {r.impl for r in gate_records} & {"pearl"}

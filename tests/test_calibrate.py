"""``python -m pearl_moe calibrate``: the latency model against every committed H200 measurement."""

import json
import re

import pytest

from pearl_moe import calibrate
from pearl_moe.__main__ import main as cli
from pearl_moe.perfmodel import CALIBRATED


def _our_ok_records():
    n = 0
    for path in sorted((calibrate.RESULTS / "H200").glob("*.json")):
        run = json.loads(path.read_text())
        n += sum(
            1 for r in run["records"] if r["impl"].startswith("pearl-s") and r["status"] == "ok"
        )
    return n


def test_every_committed_record_of_our_kernels_is_compared():
    records, excluded = calibrate.load_records()
    assert len(records) + len(excluded) == _our_ok_records()
    assert not excluded  # every committed record carries its configuration
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
    passed = summary["max_error"] <= calibrate.MAX_ERROR and summary["spearman"] >= 0.9
    assert rc == (0 if passed else 1)
    assert ("PASS" if passed else "FAIL") in out.splitlines()[-1]


def test_the_model_ranks_the_measurements():
    records, _ = calibrate.load_records()
    s = calibrate.summary(calibrate.evaluate(records, CALIBRATED))
    assert s["spearman"] >= calibrate.MIN_SPEARMAN
    # 5.6% since the ablation of 2026-11-30 15:22 (warp-parallel walk) replaced the one the
    # parameters were fitted on (serial walk): the model has no term for what the walk does to
    # the kernel (notebook 09, section 9); 6.1% since tile_shapes.json (2026-11-30 17:36) added
    # 66 records of tile shapes the fit never saw (median 11.8% on those, notebook 04)
    assert s["median_error"] <= 0.065


def test_tile_shapes_run_is_modeled_out_of_sample_as_notebook_04_says():
    from pathlib import Path

    path = Path(calibrate.RESULTS) / "H200" / "tile_shapes.json"
    if not path.exists():
        pytest.skip("no committed results/H200/tile_shapes.json")
    every, _ = calibrate.load_records()
    records = [r for r in every if r.source == "tile_shapes.json"]
    assert len(records) == 66
    rows = calibrate.evaluate(records, CALIBRATED)
    s = calibrate.summary(rows)
    assert 0.115 <= s["median_error"] <= 0.12
    wide64 = [
        r["error"] for r in rows if r["config"].startswith(("sm_90a 64x192", "sm_90a 64x256"))
    ]
    wide64 += [r["error"] for r in rows if r["config"].startswith("sm_90a 64x64")]
    assert 0.35 <= max(wide64) <= 0.37  # "up to 36% slow"
    s5 = [r["error"] for r in rows if r["impl"] == "pearl-s5" and "|1024|" in r["problem"]]
    assert 0.43 <= max(s5) <= 0.45  # "up to 44% slow"


@pytest.mark.xfail(
    strict=True,
    reason=(
        "largest error 44.4% (> 10%; 314 records, median 6.1%, Spearman 0.990). The fit of "
        "2026-11-30 (134 records, serial walk) was at 13.2%. Missing mechanisms, each seen in "
        "several records: the L2 term charges every TMA box in full, while the L2 serves CTAs "
        "that read the same data at once together (0.55-0.96 of the boxes' sectors under Nsight "
        "Compute), so it overcharges 64-row tiles that are wide (64 x 192, 64 x 256: up to 36% "
        "slow), 64 x 64 tiles, and 64 x 128 tiles without wide B at 1024 tokens (up to 44% slow; "
        "tile_shapes.json, out of sample), and 128 x 128 ping-pong tiles are modeled 13-20% "
        "fast; at 4096 tokens 64 x 64, 128 x 64 and 64 x 128 tiles (without wide B, or "
        "with the warp-parallel walk) read 2-4.7x the HBM bytes the model counts once (L2 reuse "
        "between CTAs lost; Nsight Compute, notebook 09 section 11), which is most of the walk's "
        "prefill cost (1.03-1.27x the serial walk's time); 64 x 128 tiles at 1 token modeled "
        "11-17% fast; and "
        "the H200 runs every shape at its 700 W power cap with a kernel-dependent SM clock "
        "(1.17-1.62 GHz), where the model has one clock and no power term"
    ),
)
def test_calibration_gate():
    assert calibrate.main([]) == 0


def test_spearman_with_ties():
    assert calibrate.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert calibrate.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert calibrate.spearman([1, 1, 2, 3], [5, 5, 6, 7]) == pytest.approx(1.0)


def test_thresholds_are_options(capsys):
    assert calibrate.main(["--max-error", "0.5", "--min-spearman", "0.5"]) == 0
    assert calibrate.main(["--max-error", "0.001"]) == 1
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
    from pearl_moe.bench.records import SCHEDULER, environment, run_scheduler

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

"""The first-run command's orchestration, on a CPU: which phases run, with what, and the summary."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from pearl_moe.diagnostics import selftest
from pearl_moe.kernels import api


def _args(*argv):
    return selftest.parse_args(list(argv))


def test_plan_runs_every_phase_in_order(tmp_path):
    phases = selftest.plan(_args(), "B200", tmp_path, "/opt/cuda/bin/compute-sanitizer")
    names = [p.name for p in phases]
    assert names == [
        "environment",
        "tests",
        "descriptors",
        "sanitizers:memcheck",
        "sanitizers:racecheck",
        "sanitizers:synccheck",
        "tune",
        "ablation",
        "compare",
    ]
    by = {p.name: p for p in phases}
    assert by["tests"].command[1:6] == ["-m", "pytest", "-m", "gpu", "-q"]
    for tool in selftest.SANITIZER_TOOLS:
        cmd = by[f"sanitizers:{tool}"].command
        assert cmd[:3] == ["/opt/cuda/bin/compute-sanitizer", "--tool", tool]
        assert cmd[-3:] == ["-m", "pearl_moe.diagnostics.selftest", "--cases"]
    # the comparison's default call reads the table the tune phase wrote
    table = tmp_path / "tuning_B200.json"
    assert str(table) in by["tune"].command
    assert by["compare"].env == {"PEARL_MOE_TUNING": str(table)}
    assert "quack" in by["compare"].command[by["compare"].command.index("--impls") + 1]


def test_plan_quick_and_subsets(tmp_path):
    phases = selftest.plan(_args("--quick", "--phases", "compare,tests"), "H200", tmp_path, None)
    assert [p.name for p in phases] == ["tests", "compare"]  # the phases keep their order
    compare = phases[1]
    assert "--tokens" in compare.command and compare.env == {}  # no tune phase: no new table
    with pytest.raises(ValueError, match="unknown phases"):
        selftest.plan(_args("--phases", "tests,benchmark"), "H200", tmp_path, None)


def _fake_runner(codes: dict, seen: list):
    def run(command, stdout, stderr, env, cwd, timeout, check):
        name = next(k for k in codes if k in command)
        seen.append((name, command, env))
        stdout.write(f"{name} output\n========= ERROR SUMMARY: {codes[name]} errors\n")
        return types.SimpleNamespace(returncode=codes[name])

    return run


def test_run_phase_records_outcome_and_skips_without_a_sanitizer(tmp_path):
    seen = []
    phase = selftest.Phase("tests", [sys.executable, "-m", "pytest"], "pytest_gpu.log")
    selftest.run_phase(phase, tmp_path, _fake_runner({"pytest": 3}, seen))
    assert phase.ok is False and phase.returncode == 3
    assert "ERROR SUMMARY: 3 errors" in phase.note
    assert (tmp_path / "pytest_gpu.log").read_text().startswith("pytest output")
    missing = selftest.Phase(
        "sanitizers:memcheck", ["no-such-compute-sanitizer", "--tool", "memcheck"], "memcheck.log"
    )
    selftest.run_phase(missing, tmp_path, _fake_runner({}, seen))
    assert missing.ok is None and "not found" in missing.note


def test_run_phase_reports_a_hang(tmp_path):
    def hang(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    phase = selftest.Phase("tune", ["x"], "tune.log", timeout_s=5)
    selftest.run_phase(phase, tmp_path, hang)
    assert phase.ok is False and "timed out after 5 s" in phase.note


def test_main_runs_all_phases_and_says_what_failed(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    import pearl_moe.kernels.autotune as autotune
    import pearl_moe.kernels.targets as targets

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(targets, "gpu_target", lambda device: ("sm_100a", "sm_100a"))
    monkeypatch.setattr(autotune, "gpu_name", lambda device=None: "B200")
    seen = []
    codes = {
        "--environment": 0, "pytest": 0, "--descriptors": 0, "memcheck": 0, "racecheck": 1,
        "synccheck": 0, "tune": 0, "ablation": 0, "compare": 0,
    }  # fmt: skip
    fake = _fake_runner(codes, seen)
    real_run_phase = selftest.run_phase
    monkeypatch.setattr(selftest, "run_phase", lambda p, out: real_run_phase(p, out, fake))
    rc = selftest.main(["--out", str(tmp_path), "--sanitizer", sys.executable])
    assert rc == 1
    assert [name for name, _, _ in seen] == list(codes)
    record = json.loads((tmp_path / "selftest.json").read_text())
    assert record["gpu"] == "B200" and record["target"] == "sm_100a"
    failed = [p["name"] for p in record["phases"] if p["ok"] is False]
    assert failed == ["sanitizers:racecheck"]
    text = capsys.readouterr().out
    assert "FAILED: sanitizers:racecheck" in text
    assert "send back" in text.splitlines()[-1]


def test_main_without_a_gpu_says_so(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert selftest.main([]) == 2
    assert "none is visible" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["sm_90a", "sm_100a"])
def test_sanitizer_cases_stress_what_they_say(family):
    cases = selftest.cases_for(family)
    for name, stage, config, counts, n, k in cases:
        config = config.resolved()
        assert api.can_implement(config, stage, n, k) == [], (family, name)
        assert 0 in counts, "every case has a zero-row expert"
        k_tiles = k // config.tile_k
        if stage in (2, 3):
            assert {1, 15, 16, 200} <= set(counts)
            assert config.epilogue == "tma_store", "the descriptor path"
        if stage == 6:
            assert config.b_k_tiles == 2 and k_tiles % 2 == 1
        if stage == 7:
            assert k_tiles < config.ring_depth and n % 512
    two_cta = [c for c in cases if c[2].cta_group == 2 and c[2].epilogue == "tma_store"]
    assert len(two_cta) == (1 if family == "sm_100a" else 0)
    assert len(cases) == (6 if family == "sm_100a" else 5)

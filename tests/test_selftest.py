"""The first-run command on a CPU, with a fake GPU: its plan, its phases and their time limits, a
hung smoke launch, a hung and a crashing GPU test under the per-test watchdog, the record and the
summary (what to send back)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import types

import pytest

from pearl_moe.diagnostics import gpu_cases, selftest, watchdog
from pearl_moe.kernels import api

SMOKE_100 = [f"smoke:{c.id}" for c in gpu_cases.SMOKE["sm_100a"]]


def _args(*argv):
    return selftest.parse_args(list(argv))


def test_plan_runs_smoke_first_then_every_phase_in_order(tmp_path):
    phases = selftest.plan(_args(), "B200", tmp_path, "/opt/cuda/bin/compute-sanitizer")
    names = [p.name for p in phases]
    assert names == [
        "environment",
        *SMOKE_100,
        "descriptors",
        "tests",
        *[f"sanitizers:{t}" for t in selftest.SANITIZER_TOOLS],
        *[f"multitile:{t}" for t in selftest.SANITIZER_TOOLS],
        "tune",
        "ablation",
        "compare",
    ]
    by = {p.name: p for p in phases}
    # one process per kernel family, each with a short limit, before anything long runs
    assert len(SMOKE_100) == len({c.id for c in gpu_cases.SMOKE["sm_100a"]}) >= 10
    for name in SMOKE_100:
        assert by[name].command[-3:] == ["--smoke", name.split(":", 1)[1], str(tmp_path)]
        assert by[name].timeout_s == selftest.SMOKE_TIMEOUT_S
    tests = by["tests"]
    assert tests.kind == "pytest" and tests.test_timeout_s == selftest.TEST_TIMEOUT_S
    assert tests.command[1:5] == ["-m", "pytest", "-m", "gpu"]
    assert "pearl_moe.diagnostics.watchdog" in tests.command
    assert tests.env[watchdog.ENV_TIMEOUT] == f"{selftest.TEST_TIMEOUT_S}"
    for tool in selftest.SANITIZER_TOOLS:
        for phase, mode in (("sanitizers", "--cases"), ("multitile", "--multitile")):
            cmd = by[f"{phase}:{tool}"].command
            assert cmd[:3] == ["/opt/cuda/bin/compute-sanitizer", "--tool", tool]
            assert cmd[-3:] == ["-m", "pearl_moe.diagnostics.selftest", mode]
            # every kernel is checked: the references run on the CPU, not through cuBLAS
            assert "--kernel-name-exclude" not in cmd, cmd
    # the comparison's default call reads the table the tune phase wrote
    table = tmp_path / "tuning_B200.json"
    assert str(table) in by["tune"].command
    assert by["compare"].env == {"PEARL_MOE_TUNING": str(table)}
    assert "quack" in by["compare"].command[by["compare"].command.index("--impls") + 1]


def test_plan_for_hopper_smokes_the_sm90_families(tmp_path):
    phases = selftest.plan(_args("--phases", "smoke"), "H100", tmp_path, None, "sm_90a")
    assert [p.name for p in phases] == [f"smoke:{c.id}" for c in gpu_cases.SMOKE["sm_90a"]]


def test_plan_quick_subsets_limits_and_tools(tmp_path):
    args = _args("--quick", "--phases", "compare,multitile,tests", "--tools", "memcheck",
                 "--test-timeout", "90")  # fmt: skip
    phases = selftest.plan(args, "H200", tmp_path, None)
    assert [p.name for p in phases] == ["tests", "multitile:memcheck", "compare"]
    assert phases[0].test_timeout_s == 90 and phases[0].limit().endswith("90 s a test")
    compare = phases[-1]
    assert "--tokens" in compare.command and compare.env == {}  # no tune phase: no new table
    with pytest.raises(ValueError, match="unknown phases"):
        selftest.plan(_args("--phases", "tests,benchmark"), "H200", tmp_path, None)
    with pytest.raises(ValueError, match="unknown tools"):
        selftest.plan(_args("--tools", "initcheck"), "H200", tmp_path, None)


def test_dry_run_on_a_cpu_lists_the_b200_plan_with_its_limits(tmp_path):
    """What the issue asks of a machine without a GPU: the smoke, descriptor, sm_100a suite,
    multi-tile sanitizer and tuning phases, each with its time limit (a real process)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    res = subprocess.run(
        [sys.executable, "-m", "pearl_moe", "selftest", "--dry-run", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    text = res.stdout
    assert "B200 (sm_100a)" in text
    lines = {ln.split()[0]: ln for ln in text.splitlines()[1:] if ln.strip()}
    for name in SMOKE_100:
        assert f"limit {selftest.SMOKE_TIMEOUT_S} s" in lines[name]
    assert "limit 900 s" in lines["descriptors"]
    assert f"{selftest.TEST_TIMEOUT_S} s a test" in lines["tests"]
    assert "-m gpu" in lines["tests"] and "tests" in lines["tests"]
    for tool in selftest.SANITIZER_TOOLS:
        assert "--multitile" in lines[f"multitile:{tool}"]
        assert "limit 2400 s" in lines[f"multitile:{tool}"]
    assert "pearl_moe tune" in lines["tune"] and "limit 7200 s" in lines["tune"]
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


def _fake_runner(codes: dict, seen: list, effects=None):
    """A stand-in for the process runner: the first key of ``codes`` found in the command picks
    the exit status; ``effects[key](command)`` may write files or raise (a hang)."""

    def run(command, stdout, stderr, env, cwd, timeout):
        name = next(k for k in codes if k in command)
        seen.append((name, command, env))
        if effects and name in effects:
            effects[name](command, env)
        stdout.write(f"{name} output\n========= ERROR SUMMARY: {codes[name]} errors\n")
        return types.SimpleNamespace(returncode=codes[name])

    return run


def test_run_phase_records_outcome_and_skips_without_a_sanitizer(tmp_path):
    seen = []
    phase = selftest.Phase("descriptors", [sys.executable, "--descriptors"], "descriptors.log")
    selftest.run_phase(phase, tmp_path, _fake_runner({"--descriptors": 3}, seen))
    assert phase.ok is False and phase.returncode == 3
    assert "ERROR SUMMARY: 3 errors" in phase.note
    assert (tmp_path / "descriptors.log").read_text().startswith("--descriptors output")
    for name in ("sanitizers:memcheck", "multitile:racecheck"):
        missing = selftest.Phase(name, ["no-such-compute-sanitizer", "--tool", "x"], "x.log")
        selftest.run_phase(missing, tmp_path, _fake_runner({}, seen))
        assert missing.ok is None and "not found" in missing.note


def test_a_hung_smoke_launch_is_ended_with_its_process_group_and_named(tmp_path):
    """A real child that never returns, and a grandchild of it (as compute-sanitizer starts the
    program it wraps): at the limit both are gone, and the summary names the kernel family."""
    pid_file = tmp_path / "grandchild.pid"
    code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(120)
        """
    )
    phase = selftest.Phase("smoke:stage7-split-accumulator", [sys.executable, "-c", code],
                           "smoke_stage7.log", timeout_s=3)  # fmt: skip
    t0 = time.monotonic()
    selftest.run_phase(phase, tmp_path)
    assert time.monotonic() - t0 < 60
    assert phase.ok is False and phase.note == "timed out after 3 s (hung?)"
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # the kill is asynchronous: the pid may linger a moment as a zombie
        try:
            os.kill(grandchild, 0)
            with open(f"/proc/{grandchild}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the smoke process's child outlived the phase")
    ok = selftest.Phase("smoke:stage1-dense", ["true"], "smoke_stage1.log")
    ok.ok, ok.note = True, "smoke: stage1-dense: ok"
    text = selftest.summary([ok, phase], tmp_path, "B200")
    assert "FAILED: smoke:stage7-split-accumulator" in text
    assert "hung (ran past their limit): smoke:stage7-split-accumulator" in text


SUITE = {
    "test_a.py": "def test_passes():\n    assert True\n",
    "test_b.py": "import time\n\ndef test_hangs():\n    time.sleep(120)\n\n"
    "def test_after_the_hang():\n    assert True\n",
    "test_c.py": "def test_poisons_the_context():\n"
    "    raise RuntimeError('CUDA error: an illegal memory access was encountered')\n\n"
    "def test_after_the_crash():\n    assert True\n",
    "test_d.py": "def test_fails():\n    assert 1 == 2\n",
}


def test_the_test_phase_names_a_hung_test_and_goes_on_without_it(tmp_path):
    """A real pytest under the watchdog: the hanging test is ended at its limit and named, with
    its traceback; a test that poisons the CUDA context ends its process; the tests after each
    run in a fresh process; an ordinary failure is counted."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in SUITE.items():
        (suite / name).write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    args = _args("--phases", "tests", "--test-timeout", "4")
    (phase,) = selftest.plan(args, "B200", out, None)
    # the suite above, not the package's GPU tests
    at = phase.command.index("gpu")
    phase.command = [*phase.command[: at - 1], *phase.command[at + 1 : -1], str(suite)]
    selftest.run_phase(phase, out)
    hung = "test_b.py::test_hangs"
    assert phase.ok is False
    assert [t.split("suite/")[-1] for t in phase.details["hung"]] == [hung]
    assert [t.split("suite/")[-1] for t in phase.details["poisoned"]] == [
        "test_c.py::test_poisons_the_context"
    ]
    assert phase.details["outcomes"] == {"passed": 3, "failed": 2}
    assert phase.details["runs"] == 3
    assert f"hung or crashed: {phase.details['hung'][0]} (limit 4 s a test)" in phase.note
    tracebacks = (out / "pytest_progress.tsv.tracebacks").read_text()
    assert "Timeout (0:00:04)!" in tracebacks and "line 4 in test_hangs" in tracebacks
    log = (out / "pytest_gpu.log").read_text()
    assert "did not finish" in log and "CUDA context unusable" in log
    text = selftest.summary([phase], out, "B200")
    assert "hung or crashed tests:" in text and hung in text


def test_read_progress_finds_the_test_a_process_died_in(tmp_path):
    path = tmp_path / "progress.tsv"
    path.write_text("session 1 timeout 600\nstart\ta\nend\ta\tpassed\t1.0\nstart\tb\n")
    state = watchdog.read_progress(path)
    assert state["outcomes"] == {"a": ("passed", 1.0)} and state["hung"] == ["b"]
    assert watchdog.read_progress(tmp_path / "missing")["hung"] == []


def test_main_runs_all_phases_records_the_gpu_and_says_what_to_send_back(tmp_path, monkeypatch,
                                                                          capsys):  # fmt: skip
    """On a fake B200: every phase in order, a hung smoke launch named, the record holds the
    driver's cluster count beside ``sms // 2`` and the architecture of the cubins loaded."""
    from fake_cuda import install_fake_gpu

    import pearl_moe.kernels.autotune as autotune

    install_fake_gpu(monkeypatch, "NVIDIA B200", (10, 0), 148)
    monkeypatch.setattr(autotune, "gpu_name", lambda device=None: "B200")
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    seen = []
    hung_family = "stage7-split-accumulator"

    def environment(command, env):
        (tmp_path / "environment.json").write_text(json.dumps(
            {"gpu": "NVIDIA B200", "capability": "10.0", "sm_count": 148, "sms_half": 74,
             "max_active_clusters_2": 72, "compile_target": "sm_100a"}))  # fmt: skip

    def smoke(command, env):
        family = command[command.index("--smoke") + 1]
        if family == hung_family:
            raise subprocess.TimeoutExpired(command, 300)
        (tmp_path / f"smoke_{family}.json").write_text(
            json.dumps({"case": family, "binary_version": 100})
        )

    codes = {"racecheck": 1, "--environment": 0, "--smoke": 0, "--descriptors": 0, "pytest": 0,
             "--cases": 0, "--multitile": 0, "tune": 0, "ablation": 0, "compare": 0}  # fmt: skip

    def tests(command, env):  # the watchdog's progress file: one test, passed
        with open(env[watchdog.ENV_PROGRESS], "w") as f:
            f.write("start\tt::a\nend\tt::a\tpassed\t1.0\n")

    effects = {"--environment": environment, "--smoke": smoke, "pytest": tests}
    monkeypatch.setattr(selftest, "_run_in_group", _fake_runner(codes, seen, effects))
    rc = selftest.main(["--out", str(tmp_path), "--sanitizer", sys.executable])
    assert rc == 1
    order = [name for name, _, _ in seen]
    assert order[0] == "--environment" and order[1 : 1 + len(SMOKE_100)] == ["--smoke"] * len(
        SMOKE_100
    )
    assert order[1 + len(SMOKE_100) :] == ["--descriptors", "pytest", "--cases", "racecheck",
                                           "--cases", "--multitile", "racecheck", "--multitile",
                                           "tune", "ablation", "compare"]  # fmt: skip
    record = json.loads((tmp_path / "selftest.json").read_text())
    assert record["gpu"] == "B200" and record["target"] == "sm_100a"
    assert record["environment"]["max_active_clusters_2"] == 72
    assert record["environment"]["sms_half"] == 74 and record["environment"]["sm_count"] == 148
    assert set(record["cubins"].values()) == {100}
    assert hung_family not in record["cubins"]
    failed = sorted(p["name"] for p in record["phases"] if p["ok"] is False)
    assert failed == sorted([f"smoke:{hung_family}", "sanitizers:racecheck", "multitile:racecheck"])
    text = capsys.readouterr().out
    assert f"hung (ran past their limit): smoke:{hung_family}" in text
    assert "clusters of 2 CTAs the driver fits at once: 72 (sms // 2 = 74)" in text
    assert "cubins the driver loaded (smoke launches): 100" in text
    assert text.splitlines()[-1].startswith("send back: tar czf selftest_B200.tgz")


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


def test_the_sanitized_children_compute_their_references_on_the_cpu(monkeypatch):
    """What compute-sanitizer wraps (the cases and the multi-tile cases) asks every check for
    its references on the CPU, so the GPU runs our kernels only (cuBLAS's own kernels report
    racecheck hazards, and excluding them by name made them fail under racecheck on an H100)."""
    seen = []

    def fake_check(case, seed=0, keep_output=False, cpu_reference=False, **kw):
        seen.append((case.id, cpu_reference))
        return {"ok": True}

    monkeypatch.setattr(gpu_cases, "check_case", fake_check)
    monkeypatch.setattr(gpu_cases, "check_any", fake_check)
    assert selftest.run_cases("sm_90a") and selftest.run_multitile("sm_90a")
    want = len(gpu_cases.SANITIZER["sm_90a"]) + len(gpu_cases.MULTI_TILE["sm_90a"])
    assert len(seen) == want and all(cpu for _, cpu in seen), seen


def test_a_cpu_reference_judges_the_output_as_the_gpu_reference_would(monkeypatch):
    """``run_checked(..., cpu_reference=True)``: the references computed from CPU copies pass a
    right answer and fail one with an unwritten element (the NaN poison left in place)."""
    import torch

    from pearl_moe.bench.verify import random_inputs, reference, run_checked

    if not torch.cuda.is_available():  # the inputs are on the CPU here: nothing to wait for
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    A, W, offs = random_inputs((5, 0, 70, 33), 96, 72, seed=3, device="cpu")
    host = offs.tolist()

    def right(A, W, o, out):
        out.copy_(reference(A, W, host).to(out.dtype))

    def one_unwritten(A, W, o, out):
        right(A, W, o, out)
        out[3, 4] = float("nan")

    assert run_checked(right, A, W, offs, host, cpu_reference=True)["ok"]
    bad = run_checked(one_unwritten, A, W, offs, host, cpu_reference=True)
    assert not bad["ok"] and bad["unwritten"] == 1

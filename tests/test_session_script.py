"""``scripts/h200_session.py`` end to end on a CPU: every phase with fakes in place of the GPU (tiny
problems, a fake CUDA clock, fake kernels), so the one device call it is written for does not
fail on orchestration. Plus the ``--plan`` estimate."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import pytest
import torch
from fake_cuda import FakeCuda

from pearl_moe import workloads
from pearl_moe.bench import cli, harness, records, registry, tune
from pearl_moe.kernels import api, autotune
from pearl_moe.workloads import GroupedProblem

ROOT = Path(__file__).resolve().parent.parent
CEIL = {"read_bytes_per_s": 4.0e12, "bf16_flops_per_s": 800e12}


def _script():
    spec = importlib.util.spec_from_file_location(
        "h200_session", ROOT / "scripts" / "h200_session.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plan_runs_on_a_cpu(capsys):
    assert _script().main(["--plan"]) == 0
    text = capsys.readouterr().out
    for phase in ("precompile", "tune", "compare", "ablation", "first-call", "total"):
        assert phase in text
    assert "21 shapes" in text and "18 shapes" in text and "12 shapes" in text


@pytest.fixture
def fake_machine(monkeypatch):
    fake = FakeCuda(drift=lambda t: 1.0 + 0.1 * t).install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device=None: types.SimpleNamespace(L2_cache_size=1 << 20, multi_processor_count=132),
    )
    monkeypatch.setattr(api, "_arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(autotune, "gpu_name", lambda device=None: "H200")
    monkeypatch.setattr(harness, "measure_ceilings", lambda *a, **k: dict(CEIL))
    monkeypatch.setattr(cli, "load_clocks", lambda when: {"when": when, "source": "fake"})
    monkeypatch.setattr(
        records,
        "environment",
        lambda command=None: {"gpu": "NVIDIA H200", "date": "2026-12-01T00:00:00+00:00",
                              "command": command},
    )  # fmt: skip
    monkeypatch.setattr(
        tune,
        "precompile_with_progress",
        lambda reqs, jobs, tqdm: {"requests": len(reqs), "compiled": len(reqs), "cached": 0,
                                  "failed": {}, "seconds": 0.0},
    )  # fmt: skip

    real_make = workloads.make_problem

    def tiny(model, tokens, ep=8, routing="balanced", projection="gate_up", seed=0):
        big = real_make(model, tokens, ep, routing, projection, seed)
        counts = tuple(min(c, 6) for c in big.counts[:6])
        return GroupedProblem(k=128, n=256, counts=counts, name=big.name, meta=big.meta)

    monkeypatch.setattr(workloads, "make_problem", tiny)

    def candidate(label, stage, config):
        cost = 0.9e-4 if (config.tile_m, config.tile_n) == (64, 256) else 1.0e-4
        impl = fake.impl(label, cost)
        return harness.Implementation(
            label,
            lambda *a: harness.Prepared(impl.prepare(*a).run, {"stage": stage}),
        )

    monkeypatch.setattr(tune, "_candidate", candidate)
    monkeypatch.setattr(tune, "_progress", lambda: cli._PlainProgress)  # the GPU machine: no tqdm
    registry.load_providers()
    costs = {"pearl": 0.95e-4, "triton": 1.0e-4, "grouped_mm": 1.1e-4, "loop": 1.2e-4}
    costs |= {"quack-tuned": 1.3e-4, "pearl-s3": 1.1e-4, "pearl-s4": 1.0e-4}
    for name, cost in costs.items():
        monkeypatch.setitem(registry.REGISTRY, name, lambda n=name, c=cost: fake.impl(n, c))
    monkeypatch.setattr(autotune, "stage_available", lambda arch, stage: stage in (3, 4))
    monkeypatch.setattr(autotune, "_kernel_problems", lambda *a: [])
    yield fake
    autotune.use_table(None)


def test_session_runs_every_phase_and_writes_its_files(fake_machine, tmp_path, capsys):
    out = tmp_path / "out"
    rc = _script().main(
        ["--out", str(out), "--phases", "precompile,tune,compare,ablation", "--models", "glm",
         "--tune-tokens", "1,64", "--compare-tokens", "1,64", "--ablation-tokens", "64",
         "--rounds", "3", "--reps", "2", "--tune-rounds", "3", "--tune-reps", "2",
         "--limit", "40", "--kernel-cache", str(tmp_path / "kc"), "--device", "cpu",
         # budgets no machine can run out of: the outcome must not depend on its speed
         "--budget-s", "1e9", "--tune-s", "1e9", "--compare-s", "1e9", "--ablation-s", "1e9"]
    )  # fmt: skip
    captured = capsys.readouterr()
    printed = captured.out
    assert rc == 0
    session = json.loads((out / "session.json").read_text())
    for phase in ("precompile", "ceilings", "tune", "compare", "ablation"):
        assert session["phases"][phase]["ok"], (session["phases"][phase], captured.err[-3000:])
    assert session["ablation_stages_here"] == ["pearl-s3", "pearl-s4"]
    table = json.loads((out / "tuning_H200.json").read_text())
    assert len(table["entries"]) == 2  # one per token count
    assert all(e["label"].startswith("sm_90a 64x256") for e in table["entries"])
    comp = records.read_run(out / "compare.json")
    assert comp["compare"]["compared"] == 3  # 1, 64 balanced + 64 skewed
    assert comp["compare"]["geomean_ratio"] == pytest.approx(0.95, abs=0.01)
    q = [r for r in comp["records"] if r["impl"] == "quack-tuned"]
    assert {r["problem"].split("|")[2] for r in q} == {"1", "64"}  # every decode shape run
    abl = records.read_run(out / "ablation.json")
    assert {r["impl"] for r in abl["records"]} == {"pearl-s3", "pearl-s4"}
    assert printed.rstrip().splitlines()[-1].startswith("session ")
    assert "geomean ratio" in printed and "pearl-s3 -> pearl-s4" in printed

"""The MoE layer benchmark on the CPU: problems, the check against the float32 layer, the
interleaved timing over CUDA graphs and the step profile (a fake CUDA runtime stands in for the
GPU), and its runs read and written by pearl_moe.results."""

from __future__ import annotations

import json

import pytest
import torch
from fake_cuda import FakeCuda, guard_prepared_state

from pearl_moe import results
from pearl_moe.bench import compare, layer, layer_impls, registry
from pearl_moe.bench.registry import Implementation, Prepared
from pearl_moe.config import GemmConfig
from pearl_moe.workloads import shape_model

SMALL = shape_model(96, 64, 6, top_k=2, ep=1)  # hidden 64, intermediate 48, 6 experts
ENV = {"gpu": "NVIDIA H200", "date": "2026-12-02"}


def _impl(name, fake=None, seconds=1e-4, broken=False):
    from pearl_moe.moe import moe_forward

    def prepare(inputs):
        def run():
            weights = inputs["topk_weights"] * (0.5 if broken else 1.0)
            out = moe_forward(inputs["x"], inputs["w_gate_up"], inputs["w_down"],
                              topk_ids=inputs["topk_ids"], topk_weights=weights, backend="loop")  # fmt: skip
            if fake is not None and fake.capturing is not None:
                fake.capturing.cost += seconds
                fake.capturing.name = name
            return out

        return Prepared(run, {"seconds": seconds})

    return Implementation(name, prepare)


def test_layer_problems_count_both_weight_sets_of_the_active_experts():
    p = layer.LayerProblem("GLM 5.3", 64)
    assert (p.hidden, p.intermediate, p.experts, p.top_k) == (6144, 2048, 32, 8)
    assert p.rows == 512 and p.active_experts == 32
    assert p.bytes_moved() == 2 * (32 * 3 * 6144 * 2048 + 2 * 64 * 6144)
    assert p.flops == 6 * 512 * 6144 * 2048
    one = layer.LayerProblem("GLM 5.3", 1)
    assert one.active_experts == 8 and one.choices().shape == (1, 8)
    assert p.id == "GLM 5.3|layer|64|EP8|balanced"
    entry = p.entry({"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14})
    assert entry["floor_us"] == pytest.approx(p.bytes_moved() / 4e12 * 1e6)
    probs = layer.layer_problems(["glm", "kimi"], [1, 64], skewed_tokens=[64])
    assert [q.id for q in probs][-1] == "Kimi K3|layer|64|EP8|skewed" and len(probs) == 6
    with pytest.raises(ValueError, match="routing"):
        layer.LayerProblem("GLM 5.3", 1, routing="hot")
    with pytest.raises(ValueError, match="EP degree"):
        layer.LayerProblem("GLM 5.3", 1, ep=7)


def test_the_check_passes_the_layer_and_fails_a_wrong_combine():
    problem = layer.LayerProblem(SMALL.name, 12, ep=1, routing="skewed")
    impls = {"good": _impl("good"), "broken": _impl("broken", broken=True),
             "quack": layer.layer_impl("quack"), "sonic": layer.layer_impl("sonic")}  # fmt: skip
    checks = layer.check_layer(impls, problem, device="cpu")
    assert checks["good"][0] is True and checks["broken"][0] is False
    assert checks["quack"][0] is None and checks["quack"][1].startswith("unavailable")
    # SonicMoE is not importable in this environment: it says where it runs
    assert checks["sonic"][0] is None and ".device_sonic/run.sh" in checks["sonic"][1]
    with pytest.raises(KeyError, match="unknown layer implementation"):
        layer.layer_impl("sonic-moe")


def test_layers_are_timed_in_interleaved_rounds_and_checked_after(monkeypatch):
    fake = FakeCuda(drift=lambda t: 1.0 + 0.5 * t).install(monkeypatch)
    problem = layer.LayerProblem(SMALL.name, 8, ep=1)
    impls = {"a": _impl("a", fake, 1.00e-4), "b": _impl("b", fake, 1.03e-4)}
    out = layer.time_layers(impls, problem, rounds=6, reps=3, launches=4, device="cpu")
    (ta, ca), (tb, _) = out["a"], out["b"]
    assert ca == {"seconds": 1e-4} and ta.rounds == 6 and ta.outputs_ok and tb.outputs_ok
    rec = lambda t: {"time": t.as_dict()}  # noqa: E731
    assert compare.paired_ratio(rec(tb), rec(ta))["ratio"] == pytest.approx(1.03, abs=0.005)
    names = [name for name, _ in fake.replays]
    assert names.count("a") == names.count("b")


def test_layer_runs_are_validated_and_written(tmp_path):
    problem = layer.LayerProblem("GLM 5.3", 16)
    ceilings = {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}
    run = {"schema": layer.LAYER_SCHEMA, "kind": "moe_layer", "env": ENV, "ceilings": ceilings,
           "problems": [problem.entry(ceilings)], "records": []}  # fmt: skip
    rec = layer._record(problem, "pearl", "ok", ceilings, time={"median_us": 400.0})
    run["records"].append(rec)
    assert rec["metrics"]["pct_of_floor"] == pytest.approx(
        100 * problem.floor_seconds(4e12, 8e14) / 400e-6
    )
    path = results.write_run(run, tmp_path / "moe_layer.json")
    assert results.read_run(path)["records"][0]["impl"] == "pearl"
    for breaking in (
        lambda r: r["records"][0].update(problem="nope"),
        lambda r: r["records"][0].update(status="fine"),
        lambda r: r["records"][0].pop("time"),
        lambda r: r["problems"][0].pop("top_k"),
        lambda r: r["env"].pop("gpu"),
        lambda r: r.pop("kind"),
    ):
        bad = json.loads(json.dumps(run))
        breaking(bad)
        with pytest.raises(ValueError):
            results.validate_run(bad)


def test_the_layer_command_refuses_without_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert layer.main(["--models", "glm", "--tokens", "1"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_step_bytes_count_each_pass_and_what_fusing_the_activation_removes():
    p = layer.LayerProblem("GLM 5.3", 64)
    rows, h, i = 512, 6144, 2048
    plain, fused = p.step_bytes(), p.step_bytes(fused_activation=True)
    assert list(plain) == ["gather", "gate+up GEMM", "activation", "down GEMM", "combine"]
    assert "activation" not in fused
    saved = sum(plain.values()) - sum(fused.values())
    # h (2I wide) written and read back, and the activation written: 5 I bytes per row less 1 I
    assert saved == 2 * rows * (2 * i + 2 * i + i) - 2 * rows * i
    weights = p.active_experts * 3 * h * i * 2
    assert plain["gate+up GEMM"] + plain["down GEMM"] > weights  # both weight sets, and more
    assert sum(fused.values()) > p.bytes_moved()  # a fully fused layer moves less still


def _fake_gpu_command(monkeypatch, environment=None, measure_ceilings=None):
    """What the layer command needs of a GPU, faked: a visible H200, the run's environment and
    its probed ceilings (the given ones, or a fixed env and 4 TB/s, 800 TFLOP/s)."""
    from pearl_moe.bench import harness

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(results, "environment",
                        environment or (lambda command=None: {"date": "D", "gpu": "NVIDIA H200"}))  # fmt: skip
    monkeypatch.setattr(harness, "measure_ceilings", measure_ceilings or (
        lambda: {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}))  # fmt: skip
    monkeypatch.setattr(layer, "_precompile", lambda problems, impls: None)


def test_the_layer_command_writes_a_valid_run(monkeypatch, tmp_path):
    """layer's GPU path wired end to end with the GPU work faked: checks, timings and a run file
    that validates, with a failing implementation recorded as such."""
    from pearl_moe.bench.harness import Timing

    _fake_gpu_command(monkeypatch)

    def fake_check(impls, problem, device="cuda", seed=1):
        return {n: ((False, "incorrect: wrong", 0.5) if n == "torch" else (True, "ok", 1e-3))
                for n in impls}  # fmt: skip

    def fake_time(impls, problem, rounds=6, reps=5, **kw):
        out = {}
        for n in impls:
            t = Timing.from_rounds([[1e-4]] * rounds, 10, 1)
            t.outputs_ok = True
            out[n] = (t, {"impl": n})
        return out

    def fake_steps(problem, rounds=6, reps=5, **kw):
        t = Timing.from_rounds([[1e-5]] * rounds, 10, 1)
        return {"gather": t, "combine": ValueError("not capturable")}

    monkeypatch.setattr(layer, "check_layer", fake_check)
    monkeypatch.setattr(layer, "time_layers", fake_time)
    monkeypatch.setattr(layer, "time_layer_steps", fake_steps)
    out = tmp_path / "moe_layer.json"
    argv = ["--models", "glm,kimi", "--tokens", "1,64", "--skewed-tokens", "64",
            "--impls", "pearl,pearl-fused,torch", "--steps-tokens", "64", "--out", str(out)]  # fmt: skip
    assert layer.main(argv) == 0
    run = results.read_run(out)
    assert len(run["problems"]) == 6 and set(run["impls"]) == {"pearl", "pearl-fused", "torch"}
    status = {(r["problem"], r["impl"]): r["status"] for r in run["records"]}
    assert status[("GLM 5.3|layer|64|EP8|skewed", "torch")] == "incorrect"
    assert status[("Kimi K3|layer|1|EP8|balanced", "pearl-fused")] == "ok"
    ok = [r for r in run["records"] if r["status"] == "ok" and not r["impl"].startswith("step:")]
    assert all(r["metrics"]["pct_of_floor"] > 0 for r in ok)
    # the step breakdown: at 64 tokens with balanced routing only, no floor share (not the layer)
    steps = {(r["problem"], r["impl"]): r for r in run["records"] if r["impl"].startswith("step:")}
    assert set(steps) == {(f"{m}|layer|64|EP8|balanced", f"step:{s}")
                          for m in ("GLM 5.3", "Kimi K3") for s in ("gather", "combine")}  # fmt: skip
    gather = steps[("GLM 5.3|layer|64|EP8|balanced", "step:gather")]
    assert gather["status"] == "ok" and "metrics" not in gather
    assert steps[("GLM 5.3|layer|64|EP8|balanced", "step:combine")]["status"] == "error"


def test_a_kernel_fault_stops_the_run_naming_the_implementation(monkeypatch, tmp_path, capsys):
    """A sticky CUDA error while one implementation's graph replays: the run keeps what it
    measured, records the fault against that implementation and exits 3 (nothing more can run in
    the process); an ordinary exception is only recorded for its implementation."""
    from pearl_moe.bench import harness

    _fake_gpu_command(monkeypatch)
    monkeypatch.setattr(layer, "check_layer",
                        lambda impls, problem, **kw: {n: (True, "ok", 1e-3) for n in impls})  # fmt: skip
    prepared = []

    class Impl:
        def __init__(self, name):
            self.name = name

        def prepare(self, inputs):
            prepared.append(self.name)
            if self.name == "quack":
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            raise ValueError("not capturable")

    monkeypatch.setattr(layer, "layer_impl", Impl)
    monkeypatch.setattr(layer, "make_layer_inputs", lambda problem, device, seed: {})
    monkeypatch.setattr(harness, "input_sets_for", lambda *a: 1)

    class Props:
        L2_cache_size = 1

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: Props)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(layer, "context_lost", lambda device: False)  # torch's error is ordinary
    out = tmp_path / "moe_layer.json"
    argv = ["--models", "glm", "--tokens", "1,64", "--skewed-tokens", "", "--steps-tokens", "",
            "--impls", "torch,quack", "--out", str(out)]  # fmt: skip
    assert layer.main(argv) == 3
    assert prepared == ["torch", "quack"]  # the second problem never started
    run = results.read_run(out)
    # the faulted problem stays unmeasured, so a --resume without quack times it
    assert run["problems"] == [] and run["records"] == []
    (fault,) = run["env"]["faults"]
    assert fault["impl"] == "quack" and fault["problem"] == "GLM 5.3|layer|1|EP8|balanced"
    assert "illegal" in fault["message"] and "without quack" in capsys.readouterr().err
    # the resumed part, without the culprit, times the problem and keeps the fault on record
    prepared.clear()
    assert layer.main([*argv[:-4], "--impls", "torch", "--out", str(out), "--resume"]) == 0
    run = results.read_run(out)
    assert prepared == ["torch", "torch"] and len(run["problems"]) == 2
    assert {r["impl"] for r in run["records"]} == {"torch"}  # torch's prepare error, recorded
    assert run["env"]["faults"] == [fault]


def test_sticky_errors_are_told_from_ordinary_ones(monkeypatch):
    for text in ("CUDA error: an illegal memory access was encountered",
                 "CUDA_ERROR_ILLEGAL_ADDRESS (error code: 700)", "misaligned address",
                 "triton: unspecified launch failure"):  # fmt: skip
        assert layer.device_fault(RuntimeError(text))
    assert not layer.device_fault(ValueError("not capturable"))
    assert not layer.device_fault(ValueError("not capturable"), device="cpu")
    # an ordinary message, but the context is gone: a fault (it surfaced under another name)
    monkeypatch.setattr(layer, "context_lost", lambda device: True)
    assert layer.device_fault(ValueError("not capturable"), device="cuda")


def _fake_checks_and_timings(monkeypatch) -> list:
    """Every implementation passes its check and takes 100 us; returns the list of the problems
    timed, in order."""
    from pearl_moe.bench.harness import Timing

    monkeypatch.setattr(layer, "check_layer",
                        lambda impls, problem, **kw: {n: (True, "ok", 1e-3) for n in impls})  # fmt: skip
    timed = []

    def fake_time(impls, problem, rounds=6, reps=5, **kw):
        timed.append(problem.id)
        t = Timing.from_rounds([[1e-4]] * rounds, 10, 1)
        t.outputs_ok = True
        return {n: (t, {"impl": n}) for n in impls}

    monkeypatch.setattr(layer, "time_layers", fake_time)
    return timed


def test_a_deadline_cut_layer_run_resumes_where_it_stopped(monkeypatch, tmp_path):
    """--deadline-s stops between problems and --resume times only the rest, keeping the first
    part's ceilings for every floor and listing both parts in env.parts."""
    reads = iter([4e12, 3e12])
    part = iter(["first", "second"])
    _fake_gpu_command(
        monkeypatch,
        environment=lambda command=None: {"date": next(part), "gpu": "NVIDIA H200",
                                          "command": command},
        measure_ceilings=lambda: {"read_bytes_per_s": next(reads), "bf16_flops_per_s": 8e14},
    )  # fmt: skip
    timed = _fake_checks_and_timings(monkeypatch)
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(layer.time, "monotonic", lambda: next(clock))
    out = tmp_path / "moe_layer.json"
    argv = ["--models", "glm", "--tokens", "1,16,64,256", "--skewed-tokens", "",
            "--steps-tokens", "", "--impls", "pearl", "--out", str(out)]  # fmt: skip
    assert layer.main([*argv, "--deadline-s", "15"]) == 0
    first = results.read_run(out)
    assert 0 < len(first["problems"]) < 4 and first["env"]["skipped_problems"]
    assert layer.main([*argv, "--resume"]) == 0
    run = results.read_run(out)
    assert [p["id"] for p in run["problems"]] == timed  # each problem timed once, in order
    assert len(timed) == 4 and len(run["records"]) == 4
    assert run["ceilings"]["read_bytes_per_s"] == 4e12  # the first part's, for every floor
    floors = {p["floor_us"] for p in run["problems"]}
    assert all(f > 0 for f in floors)
    parts = run["env"]["parts"]
    assert [p["date"] for p in parts] == ["first", "second"]
    assert parts[1]["ceilings"]["read_bytes_per_s"] == 3e12
    assert parts[0]["problems"] + parts[1]["problems"] == timed
    assert not run["env"].get("skipped_problems")  # the second part measured them all


def test_a_resumed_part_that_skips_a_left_problem_keeps_it_listed(monkeypatch, tmp_path):
    """A problem a deadline left for later stays in env.skipped_problems through a resumed part
    that measures other problems, and leaves it once a part measures it."""
    _fake_gpu_command(monkeypatch)
    _fake_checks_and_timings(monkeypatch)
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(layer.time, "monotonic", lambda: next(clock))
    out = tmp_path / "moe_layer.json"
    base = ["--models", "glm", "--skewed-tokens", "", "--steps-tokens", "", "--impls", "pearl",
            "--out", str(out)]  # fmt: skip
    assert layer.main([*base, "--tokens", "1,16,64", "--deadline-s", "15"]) == 0
    left = results.read_run(out)["env"]["skipped_problems"]
    assert left and all("|64|" in p or "|16|" in p for p in left)
    assert layer.main([*base, "--tokens", "256", "--resume"]) == 0  # another problem only
    assert results.read_run(out)["env"]["skipped_problems"] == left
    # a part whose deadline passes at once leaves them listed once, not twice
    assert layer.main([*base, "--tokens", "1,16,64", "--resume", "--deadline-s", "-1"]) == 0
    assert results.read_run(out)["env"]["skipped_problems"] == left
    assert layer.main([*base, "--tokens", "1,16,64", "--resume"]) == 0
    run = results.read_run(out)
    assert not run["env"].get("skipped_problems") and len(run["problems"]) == 4


def test_a_layer_run_with_other_glue_is_not_resumed(monkeypatch, tmp_path):
    """--resume continues a run only if its routing metadata and combine ran the same way
    (env.glue): times of the tensor-op glue and of the glue kernels must not share one run."""
    _fake_gpu_command(monkeypatch)
    timed = _fake_checks_and_timings(monkeypatch)
    out = tmp_path / "moe_layer.json"
    argv = ["--models", "glm", "--tokens", "1,16", "--skewed-tokens", "", "--steps-tokens", "",
            "--impls", "pearl", "--out", str(out)]  # fmt: skip
    monkeypatch.setattr(layer_impls, "glue", lambda: "torch operations")
    assert layer.main(argv) == 0
    assert results.read_run(out)["env"]["glue"] == "torch operations"
    assert layer.main([*argv, "--resume"]) == 0  # the same glue: nothing left to time
    assert len(timed) == 2
    monkeypatch.setattr(layer_impls, "glue", lambda: "Triton kernels")
    assert layer.main([*argv, "--resume"]) == 0  # other glue: both problems timed again
    run = results.read_run(out)
    assert len(timed) == 4 and run["env"]["glue"] == "Triton kernels"
    assert len(run["problems"]) == 2 and "parts" not in run["env"]
    # a run that records no glue predates the kernels: torch's, and resumed as such
    del run["env"]["glue"]
    out.write_text(json.dumps(run))
    monkeypatch.setattr(layer_impls, "glue", lambda: layer.TORCH_GLUE)
    assert layer.main([*argv, "--resume"]) == 0
    assert len(timed) == 4


def test_the_layer_device_script_asks_for_what_the_command_accepts():
    """scripts/layer_runs.sh runs on a lent GPU with little time: its command line must parse
    here, resume the committed run and cover the issue's problems."""
    import shlex
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "layer_runs.sh"
    text = script.read_text().replace("\\\n", " ")
    (command,) = [line.strip() for line in text.splitlines()
                  if line.strip().startswith("python3 -m pearl_moe layer")]  # fmt: skip
    (default,) = [line.split(":-", 1)[1].rstrip("}") for line in text.splitlines()
                  if line.startswith("IMPLS=${IMPLS:-")]  # fmt: skip
    words = shlex.split(
        command.replace('"$IMPLS"', default)
        .replace('"$DEADLINE_S"', "470")
        .replace('"$OUT/$NAME.json.gz"', "/tmp/x/moe_layer.json.gz")
        .replace("$RESUME", "--resume")
        .replace('"$@"', "")  # the script's own arguments, passed on
    )
    args = layer.parse_args(words[4:])
    assert args.resume and args.deadline_s == 470
    # every implementation but SonicMoE, which runs in its own environment (the script's sonic);
    # the in-kernel gather (pearl-gather) included, since its kernel passed its GPU tests
    assert set(args.impls.split(",")) == set(registry.impl_names("layer")) - {"sonic"}
    assert "IMPLS=sonic" in text and "NAME=moe_layer_sonic" in text
    # the course's three and issue 40's five layers, each under its own EP
    assert args.models == "all" and args.ep is None
    assert len(layer.layer_problems(args.models, [1])) == 7
    assert [int(t) for t in args.tokens.split(",")] == [1, 16, 64, 256, 1024, 4096]
    # the step profile: one command, the three decode counts, the whole layer beside
    steps = layer.parse_args(["--steps"])
    assert steps.tokens == "1,16,256" and steps.impls == "pearl-fused" and not steps.skewed_tokens
    assert 'NAME=moe_layer_steps IMPLS=pearl-fused RESUME="--steps"' in text


def test_the_committed_layer_run_is_read_gzipped_or_plain(tmp_path):
    import gzip

    assert layer.load_layer_run("H200", root=tmp_path) is None
    run = _layer_run({(1, "torch"): [100.0]}, tokens=(1,))
    run["records"].append({"problem": run["problems"][0]["id"], "impl": "quack",
                           "status": "error", "message": "no"})  # fmt: skip
    folder = tmp_path / "H200"
    plain = results.write_run(run, folder / "moe_layer.json")
    assert layer.load_layer_run("H200", root=tmp_path) == run
    # written gzipped by the same call, byte for byte the same run, and read back alike
    packed = results.write_run(run, folder / "elsewhere.json.gz")
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert results.write_run(run, folder / "again.json.gz").read_bytes() == packed.read_bytes()
    packed.rename(folder / "moe_layer.json.gz")
    plain.unlink()
    assert layer.load_layer_run("H200", root=tmp_path) == run
    assert results.read_run(folder / "moe_layer.json.gz") == run


def test_sonic_gets_its_documented_layout_and_routing(monkeypatch):
    """The SonicMoE implementation's plumbing, against a stand-in that computes what SonicMoE's
    ``moe_general_routing_inputs`` documents: w1 as a (2I, H, E) view whose rows interleave gate
    and up one by one, w2 as (H, I, E), one router score, token and expert per (token, choice),
    tokens ascending. The layer check then passes on the CPU (SonicMoE itself runs on a GPU)."""
    import sys
    import types

    import torch.nn.functional as F

    def moe_general_routing_inputs(x, scores, token, expert, w1, b1, w2, b2, E, stream_id,
                                   activation_type, is_inference_mode_enabled=False,
                                   concat_layout=False):  # fmt: skip
        assert not concat_layout and w1.shape[-1] == w2.shape[-1] == E and b1 is b2 is None
        assert bool((token[1:] >= token[:-1]).all()) and scores.dtype == torch.float32
        out = torch.zeros(x.shape[0], w2.shape[0], dtype=torch.float32)
        for pair in range(token.numel()):
            t, e = int(token[pair]), int(expert[pair])
            h = x[t].float() @ w1[:, :, e].float().T
            a = (F.silu(h[0::2]) * h[1::2]).bfloat16().float()
            out[t] += scores[pair] * (a @ w2[:, :, e].float().T)
        return out.bfloat16(), None

    fake = types.ModuleType("sonicmoe")
    fake.__version__ = "stand-in"
    functional = types.ModuleType("sonicmoe.functional")
    functional.moe_general_routing_inputs = moe_general_routing_inputs
    enums = types.ModuleType("sonicmoe.enums")
    enums.ActivationType = types.SimpleNamespace(SWIGLU="swiglu")
    for name, module in (("sonicmoe", fake), ("sonicmoe.functional", functional),
                         ("sonicmoe.enums", enums)):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda *a: types.SimpleNamespace(cuda_stream=0)
    )
    problem = layer.LayerProblem(SMALL.name, 12, ep=1, routing="skewed")
    checks = layer.check_layer({"sonic": layer.layer_impl("sonic")}, problem, device="cpu")
    assert checks["sonic"][0] is True, checks["sonic"]

    # the check can fail: a SonicMoE that read gate and up the other way round
    def swapped(x, s, t, e, w1, *rest, **kw):
        w1 = w1.reshape(-1, 2, *w1.shape[1:]).flip(1).reshape(w1.shape)  # up, gate, up, gate...
        return moe_general_routing_inputs(x, s, t, e, w1, *rest, **kw)

    monkeypatch.setattr(functional, "moe_general_routing_inputs", swapped)
    checks = layer.check_layer({"sonic": layer.layer_impl("sonic")}, problem, device="cpu")
    assert checks["sonic"][0] is False, checks["sonic"]


def test_the_steps_chain_into_the_layer_and_are_timed_together(monkeypatch):
    """step_calls cuts the forward at its passes: run in order, the steps give the layer's output;
    time_layer_steps captures each in a graph of its own and times them in interleaved rounds."""
    from pearl_moe.moe import moe_forward

    problem = layer.LayerProblem(SMALL.name, 12, ep=1, routing="skewed")
    inputs = layer.make_layer_inputs(problem, "cpu", seed=3)
    calls = layer.step_calls(inputs, backend="loop")
    assert list(calls) == [s for s in layer.STEPS if s != "gate+up (fused)"]  # fused: pearl only
    whole = moe_forward(inputs["x"], inputs["w_gate_up"], inputs["w_down"], backend="loop",
                        topk_ids=inputs["topk_ids"], topk_weights=inputs["topk_weights"])  # fmt: skip
    assert torch.equal(calls["combine"](), whole)
    assert calls["router"]().shape == inputs["topk_ids"].shape
    assert calls["gate+up"]().shape == (problem.rows, 2 * problem.intermediate)

    fake = FakeCuda().install(monkeypatch)
    cost = {s: 1e-6 * (i + 1) for i, s in enumerate(layer.STEPS)}
    _costed_steps(fake, monkeypatch, cost)
    timed = layer.time_layer_steps(problem, rounds=4, reps=2, launches=4, device="cpu")
    assert list(timed) == list(calls)
    for step, timing in timed.items():
        assert timing.median_s == pytest.approx(cost[step]), step
    names = [name for name, _ in fake.replays]
    assert all(names.count(s) == names.count("router") for s in calls)  # interleaved, evenly


def test_quack_counts_the_dsl_as_installed_code_wherever_it_is_unpacked(tmp_path):
    """quack stops fingerprinting at installed code, which it knows by a site-packages folder; the
    shim adds the DSL's own folder, leaves every other function to quack's rule, and is applied
    once however often the quack implementation is prepared."""
    import types

    from pearl_moe.bench.layer_impls import count_dsl_as_installed

    def quacks_rule(fn):
        return "site-packages" in fn.__code__.co_filename

    identity = types.SimpleNamespace(_is_extern_function=quacks_rule)
    dsl = tmp_path / "site" / "nvidia_cutlass_dsl"

    def function_in(path):
        return types.FunctionType(compile("def f(): pass", str(path), "exec").co_consts[0], {})

    in_dsl = function_in(dsl / "dsl_packages" / "cutlass" / "_mlir_helpers" / "op.py")
    beside_dsl = function_in(tmp_path / "site" / "nvidia_cutlass_dsl_other" / "x.py")
    in_site = function_in(tmp_path / "site-packages" / "y.py")
    user = function_in(tmp_path / "work" / "epilogue.py")
    assert not identity._is_extern_function(in_dsl)

    count_dsl_as_installed(identity, str(dsl))
    shimmed = identity._is_extern_function
    assert shimmed(in_dsl) and shimmed(in_site)
    assert not shimmed(user) and not shimmed(beside_dsl)
    count_dsl_as_installed(identity, str(dsl))
    assert identity._is_extern_function is shimmed


def test_a_layer_implementations_prepared_weights_live_until_its_graph_is_timed(monkeypatch):
    """pearl-fused converts its gate+up weight in ``prepare``; only its call holds the result. The
    graph of the next implementation is captured before the replays, and capturing empties the
    allocator's cache: on the H200 the freed 1.6 GB weight was unmapped and the replays faulted."""
    fake = FakeCuda().install(monkeypatch)
    keep = guard_prepared_state(monkeypatch)

    def allocating(name):
        base = _impl(name, fake)

        def prepare(inputs):
            prepared = base.prepare(inputs)
            scratch = torch.empty(4)
            keep(scratch)
            run = prepared.run
            prepared.run = lambda: (scratch, run())[1]
            return prepared

        return Implementation(name, prepare)

    problem = layer.LayerProblem(SMALL.name, 8, ep=1)
    impls = {"a": allocating("a"), "b": allocating("b")}
    out = layer.time_layers(impls, problem, rounds=2, reps=2, launches=4, device="cpu")
    assert out["a"][0].outputs_ok and out["b"][0].outputs_ok


def _layer_run(times: dict, tokens=(1, 4096)) -> dict:
    """A layer run with ``times[(tokens, impl)] = per-round medians in us`` (floor 100 us)."""
    ceilings = {"read_bytes_per_s": 4e12, "bf16_flops_per_s": 8e14}
    problems, records = [], []
    for t in tokens:
        p = layer.LayerProblem("GLM 5.3", t)
        entry = p.entry(ceilings)
        entry["floor_us"] = 100.0
        problems.append(entry)
        for (tt, impl), rounds in times.items():
            if tt == t:
                med = sorted(rounds)[len(rounds) // 2]
                records.append({"problem": p.id, "impl": impl, "status": "ok",
                                "time": {"median_us": med, "round_median_us": rounds}})  # fmt: skip
    return {"schema": layer.LAYER_SCHEMA, "kind": "moe_layer", "env": dict(ENV),
            "ceilings": ceilings, "problems": problems, "records": records}  # fmt: skip


def test_the_layer_summary_judges_the_goals_on_paired_rounds(tmp_path):
    from pearl_moe.course.doc_tables import render_layer_table

    fused = [105.0, 106.0, 104.0]
    run = _layer_run({
        (1, "pearl-fused"): fused, (1, "quack"): [120.0, 121.0, 119.0],
        (1, "torch"): [170.0, 168.0, 171.0], (1, "step:router"): [3.0, 3.0, 3.0],
        (4096, "pearl-fused"): [500.0, 505.0, 498.0], (4096, "quack"): [480.0, 482.0, 478.0],
    })  # fmt: skip
    s = layer.layer_summary(run)
    assert s["impls"] == ["pearl-fused", "quack", "torch"]  # steps are not implementations
    one, big = s["rows"]
    assert one["of_floor"] == pytest.approx(1.05)
    assert one["vs"]["quack"]["ratio"] == pytest.approx(105 / 120, rel=0.01)
    g = s["goals"]
    assert g["decode_worst_of_floor"] == pytest.approx(1.05)  # 4096 tokens is not decode
    assert g["quack_shapes"] == 2 and g["quack_above_tie"] == 1  # 500 / 480 = 1.04
    assert g["decode_speedup_over_torch"] == pytest.approx(170 / 105, rel=0.01)
    assert g["met"] == {"floor": True, "quack": False, "torch": True}
    root = tmp_path / "results"
    (root / "H200").mkdir(parents=True)
    results.write_run(run, root / "H200" / "moe_layer.json")
    table = render_layer_table(root)
    assert "| GLM 5.3 | 1 | balanced | 100.0 | 105.0 (1.050x) | 120.0 | 170.0 | 0.875 |" in table
    assert "1 of 2 above" in table and "**not met**" in table
    assert "No layer run" in render_layer_table(tmp_path / "empty")


def test_remeasure_drops_named_problems_and_lists_what_they_had(monkeypatch, tmp_path):
    """--resume --remeasure ID --why TEXT measures ID again: its entry, records and place in the
    earlier parts go, env.edits says why and what times it had, and the problem keeps its place
    in the table even when the part's command covers it alone. Refused before anything runs:
    without --resume, without --why, an id the run lacks, an id the command does not cover."""
    _fake_gpu_command(monkeypatch)
    timed = _fake_checks_and_timings(monkeypatch)
    out = tmp_path / "moe_layer.json"
    base = ["--models", "glm", "--skewed-tokens", "", "--steps-tokens", "", "--impls", "pearl",
            "--out", str(out)]  # fmt: skip
    assert layer.main([*base, "--tokens", "1,16"]) == 0
    first = results.read_run(out)["problems"][0]["id"]
    again = ["--remeasure", first, "--why", "a new default"]
    refusals = {
        "needs --resume": [*base, "--tokens", "1,16", *again],
        "not in the run": [*base, "--tokens", "1,16,64", "--resume", "--remeasure",
                           first.replace("|1|", "|64|"), "--why", "x"],
        "not among this command's problems": [*base, "--tokens", "16", "--resume", *again],
        "--why": [*base, "--tokens", "1,16", "--resume", "--remeasure", first],
    }  # fmt: skip
    for message, argv in refusals.items():
        with pytest.raises(ValueError, match=message):
            layer.main(argv)
    assert len(timed) == 2
    assert layer.main([*base, "--tokens", "1", "--resume", *again]) == 0  # this problem only
    assert timed == [timed[0], timed[1], first]
    run = results.read_run(out)
    assert [p["id"] for p in run["problems"]][0] == first and len(run["records"]) == 2
    assert run["records"][0]["problem"] == first  # in the table's order, not the parts'
    parts = run["env"]["parts"]
    assert first not in parts[0]["problems"] and parts[1]["problems"] == [first]
    (edit,) = run["env"]["edits"]
    assert first in edit and "a new default" in edit and "pearl 100.0 us" in edit
    assert not run["env"].get("skipped_problems")
    # the edits stay on record through later parts
    assert layer.main([*base, "--tokens", "1,16,64", "--resume"]) == 0
    assert results.read_run(out)["env"]["edits"] == [edit]


def test_a_dropped_problem_is_listed_as_left_until_a_part_measures_it(monkeypatch, tmp_path):
    """A part whose deadline comes before the dropped problem leaves it in skipped_problems."""
    _fake_gpu_command(monkeypatch)
    _fake_checks_and_timings(monkeypatch)
    out = tmp_path / "moe_layer.json"
    base = ["--models", "glm", "--tokens", "1", "--skewed-tokens", "", "--steps-tokens", "",
            "--impls", "pearl", "--out", str(out)]  # fmt: skip
    assert layer.main(base) == 0
    pid = results.read_run(out)["problems"][0]["id"]
    argv = [*base, "--resume", "--remeasure", pid, "--why", "x", "--deadline-s", "-1"]
    assert layer.main(argv) == 0
    run = results.read_run(out)
    assert run["env"]["skipped_problems"] == [pid] and not run["problems"]
    assert "dropped" in run["env"]["edits"][0]


def test_a_run_that_times_no_pearl_implementation_skips_the_step_breakdown(monkeypatch, tmp_path):
    """The step breakdown times our own forward: a SonicMoE-only run (its own environment, where
    our kernels do not compile) does not ask for it."""
    _fake_gpu_command(monkeypatch)
    _fake_checks_and_timings(monkeypatch)

    def no_steps(*a, **kw):
        raise AssertionError("steps timed in a run without our forward")

    monkeypatch.setattr(layer, "time_layer_steps", no_steps)
    out = tmp_path / "moe_layer.json"
    assert layer.main(["--models", "glm", "--tokens", "1", "--skewed-tokens", "",
                       "--steps-tokens", "1", "--impls", "torch", "--out", str(out)]) == 0  # fmt: skip


def test_sonicmoe_from_its_own_run_is_compared_across_runs_and_labeled_so():
    """SonicMoE runs in an environment of its own: its problems are matched by id with ours, the
    ratio is of medians (not paired), and docs/moe_layer.md's lines say it is across two runs."""
    from pathlib import Path

    from pearl_moe.course.doc_tables import _sonic_lines

    def run(impl, times, read):
        problems = [{"id": f"m|layer|{t}|EP8|balanced", "model": "m", "tokens_per_gpu": t,
                     "routing": "balanced"} for t in times]  # fmt: skip
        records = [{"problem": p["id"], "impl": impl, "status": "ok", "time": {"median_us": us}}
                   for p, us in zip(problems, times.values(), strict=True)]  # fmt: skip
        env = {
            "date": "2026-12-02T08:00",
            "gpu": "NVIDIA H200",
            "cutlass_dsl": "4.4.2",
            "quack": "0.3.11",
        }
        ceilings = {"read_bytes_per_s": read, "bf16_flops_per_s": 8e14}
        return {"env": env, "ceilings": ceilings, "problems": problems, "records": records}

    ours = run("pearl-fused", {1: 100.0, 16: 300.0}, 4.0e12)
    sonic = run("sonic", {1: 200.0, 4096: 900.0}, 3.8e12)  # 16 tokens not measured there
    rows = layer.cross_run_ratios(ours, sonic, "sonic")
    assert [(r["tokens"], r["ratio"]) for r in rows] == [(1, 0.5)]
    assert rows[0]["read_ceiling_ratio"] == pytest.approx(0.95)
    assert rows[0]["bf16_ceiling_ratio"] == 1.0
    text = "\n".join(_sonic_lines(ours, sonic, "pearl-fused", Path("H200/moe_layer_sonic.json.gz")))
    assert (
        "across runs" in text and "4.4.2" in text and "| m | 1 | balanced | 200.0 | 0.500 |" in text
    )
    assert "0.950x and 1.000x this run's" in text
    other_gpu = run("sonic", {1: 200.0}, 4e12)
    other_gpu["env"]["gpu"] = "NVIDIA B200"
    with pytest.raises(ValueError, match="different GPUs"):
        layer.cross_run_ratios(ours, other_gpu, "sonic")
    assert _sonic_lines(ours, run("sonic", {64: 1.0}, 4e12), "pearl-fused", Path("x")) == []


def test_our_records_name_the_kernels_the_default_calls_run(monkeypatch):
    """Each of our implementations records its gate+up and down kernels (what
    ``api.default_choice`` picks for the layer's shapes on this GPU); a failure to name one is
    written in its place instead of stopping the measurement."""
    import types

    from pearl_moe.kernels import api, autotune

    monkeypatch.setattr(api, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(autotune, "gpu_name", lambda device=None: "H200")
    inputs = {"x": types.SimpleNamespace(device=torch.device("cuda")),
              "w_gate_up": torch.empty(32, 4096, 6144, device="meta"),
              "w_down": torch.empty(32, 6144, 2048, device="meta"),
              "topk_ids": torch.empty(1, 8, device="meta")}  # GLM 5.3 at 1 token, EP8  # fmt: skip
    kernels = layer_impls.gemm_choices(inputs, fused=True)
    stage, config = api.default_choice("sm_90a", 4096, 6144, 32, 8, "H200", "swiglu")
    assert (
        kernels["gate_up_kernel"] == f"s{stage} {config.describe()}"
        and "swiglu" in config.describe()
    )
    stage, config = api.default_choice("sm_90a", 6144, 2048, 32, 8, "H200")
    assert kernels["down_kernel"] == f"s{stage} {config.describe()}"
    assert "gatherA" in layer_impls.gemm_choices(inputs, fused=True, gather=True)["gate_up_kernel"]
    monkeypatch.setattr(api, "arch_of", lambda device: "sm_100a")  # no gather there
    failed = layer_impls.gemm_choices(inputs, fused=True, gather=True)
    assert failed["gate_up_kernel"].startswith("not recorded: ValueError")
    assert failed["down_kernel"].startswith("s")


def test_remeasure_refuses_a_run_it_would_not_resume(monkeypatch, tmp_path):
    """A run measured with other glue is not resumed but started again: --remeasure refuses it
    before anything is probed, rather than dropping problems from a run it then replaces."""
    _fake_gpu_command(monkeypatch)
    _fake_checks_and_timings(monkeypatch)
    out = tmp_path / "moe_layer.json"
    argv = ["--models", "glm", "--tokens", "1", "--skewed-tokens", "", "--steps-tokens", "",
            "--impls", "pearl", "--out", str(out)]  # fmt: skip
    monkeypatch.setattr(layer_impls, "glue", lambda: "torch operations")
    assert layer.main(argv) == 0
    pid = results.read_run(out)["problems"][0]["id"]
    monkeypatch.setattr(layer_impls, "glue", lambda: "Triton kernels")
    probed = []
    monkeypatch.setattr(layer, "_check_dropped", lambda *a: probed.append(a))
    with pytest.raises(ValueError, match="other glue"):
        layer.main([*argv, "--resume", "--remeasure", pid, "--why", "x"])
    assert not probed


def test_the_gather_figures_the_readme_and_notebook_11_quote():
    """``pearl-gather`` against ``pearl-fused`` (median over median) in the committed layer run:
    0.974-0.982x at GLM 5.3 and DeepSeek V4 Pro at 1024 tokens, 0.977-0.997x at 4096 tokens on all
    three models, 1.36x at Kimi K3 / 1024 (its fused pick a 64-row ping-pong tile, the gather on the
    plain 128 x 128 tile); below 1024 tokens up to 1.12x slower (DeepSeek V4 Pro at 1 token)."""
    from pathlib import Path

    from pearl_moe.results import read_json

    run = read_json(Path(__file__).resolve().parent.parent / "results/H200/moe_layer.json.gz")
    t, kernels = {}, {}
    for r in run["records"]:
        if r["status"] == "ok" and r["impl"] in ("pearl-gather", "pearl-fused"):
            t[r["problem"], r["impl"]] = r["time"]["median_us"]
            kernels[r["problem"], r["impl"]] = r["config"]["gate_up_kernel"]
    ratio = {p: t[p, "pearl-gather"] / t[p, "pearl-fused"] for p, _ in t}

    def at(model, tokens):
        return ratio[f"{model}|layer|{tokens}|EP8|balanced"]

    at_1024 = [at(m, 1024) for m in ("GLM 5.3", "DeepSeek V4 Pro")]
    assert (round(min(at_1024), 3), round(max(at_1024), 3)) == (0.974, 0.982)
    at_4096 = [at(m, 4096) for m in ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3")]
    assert (round(min(at_4096), 3), round(max(at_4096), 3)) == (0.977, 0.997)
    kimi = "Kimi K3|layer|1024|EP8|balanced"
    assert round(ratio[kimi], 2) == 1.36
    fused, gathered = kernels[kimi, "pearl-fused"], kernels[kimi, "pearl-gather"]
    assert "64x256x64" in fused and "pingpong" in fused and "128x128x64" in gathered
    below = [v for p, v in ratio.items() if int(p.split("|")[2]) < 1024]
    assert round(max(below), 2) == 1.12


# ------------------------------------------------------------------------------ issue 40's layers
def test_the_layers_of_the_vllm_comparison_have_their_public_shapes_and_own_ep():
    """Issue 40's five layers (from their config.json) beside the course's three: local experts,
    hidden, intermediate and top-k as the issue's table gives them, each under its own EP; none
    is held out from the tuner, and the two models outside the shape sets resolve by their exact
    names (DeepSeek-V2 is not DeepSeek-V2-Lite)."""
    from pearl_moe.bench import shape_sets

    shapes = {(p.model, p.ep): (p.experts, p.hidden, p.intermediate, p.top_k)
              for p in layer.layer_problems("vllm", [1])}  # fmt: skip
    assert shapes == {
        ("Qwen3-30B-A3B", 1): (128, 2048, 768, 8),
        ("Qwen1.5-MoE-A2.7B", 1): (60, 2048, 1408, 4),
        ("DeepSeek-V2", 8): (20, 5120, 1536, 6),
        ("GLM 5.3", 8): (32, 6144, 2048, 8),  # GLM-5 under EP=8: the course's GLM 5.3
        ("Mixtral-8x7B", 1): (8, 4096, 14336, 2),
    }
    assert layer.layers_of("all") == [*layer.COURSE_LAYERS, *[
        lay for lay in layer.VLLM_LAYERS if lay not in layer.COURSE_LAYERS]]  # fmt: skip
    assert len(layer.LAYERS) == 7
    # a name takes its EP from LAYERS (else 8), NAME@EP or --ep override it
    assert layer.layers_of("qwen3-30b,deepseek-v2,olmoe") == [
        ("Qwen3-30B-A3B", 1), ("DeepSeek-V2", 8), ("OLMoE-1B-7B", 8)]  # fmt: skip
    assert layer.layers_of(["qwen3-30b@8", ("Mixtral-8x7B", 1)]) == [
        ("Qwen3-30B-A3B", 8), ("Mixtral-8x7B", 1)]  # fmt: skip
    assert layer.layers_of("course", ep=1) == [(m, 1) for m, _ in layer.COURSE_LAYERS]
    ids = [p.id for p in layer.layer_problems("vllm", [1, 16, 256])]
    assert len(ids) == len(set(ids)) == 15 and "DeepSeek-V2|layer|16|EP8|balanced" in ids
    for model, _ in layer.VLLM_LAYERS:
        assert shape_sets.set_of(model) != "held-out", model
    assert shape_sets.set_of("Qwen1.5-MoE-A2.7B") is None  # neither tuned on nor held out
    assert shape_sets.set_of("DeepSeek-V2") is None
    # the table's order: the layers in LAYERS' order, each by tokens
    entries = [p.entry() for p in reversed(layer.layer_problems("all", [16, 1]))]
    ranked = sorted(entries, key=layer.problem_rank)
    assert [(e["model"], e["tokens_per_gpu"]) for e in ranked[:4]] == [
        ("GLM 5.3", 1), ("GLM 5.3", 16), ("DeepSeek V4 Pro", 1), ("DeepSeek V4 Pro", 16)]  # fmt: skip
    assert ranked[-1]["model"] == "Mixtral-8x7B"


def test_a_traced_call_splits_into_its_launches_and_the_idle_time_between(monkeypatch):
    """call_trace: the profiled kernels of several calls in a row, cut into equal calls: each
    launch's median duration and the median idle time after it (the last: before the next
    call's first), their sums per call; events that do not split give the totals only."""
    kernels = [("route", 2.0), ("gather", 3.0), ("gemm", 50.0)]
    gaps = [1.0, 2.0, 4.0]  # after each kernel of a call
    events, t = [], 0.0
    for call in range(4):
        for (name, us), gap in zip(kernels, gaps, strict=True):
            events.append((name, t, us + (0.5 if call == 2 else 0.0)))  # one slower call
            t += us + gap
    trace = layer.call_trace(events, calls=4)
    assert trace["launches"] == 3 and [k["name"] for k in trace["kernels"]] == ["route", "gather",
                                                                                 "gemm"]  # fmt: skip
    assert [k["us"] for k in trace["kernels"]] == [2.0, 3.0, 50.0]
    assert trace["gaps_us"] == pytest.approx([1.0, 2.0, 4.0], abs=0.5)
    assert trace["busy_us"] == 55.0 and trace["idle_us"] == pytest.approx(7.0, abs=1.0)
    odd = layer.call_trace(events[:-1], calls=4)  # a launch missing: no per-launch breakdown
    assert odd["launches"] is None and odd["busy_us"] == pytest.approx(
        sum(e[2] for e in events[:-1]) / 4
    )
    one = layer.call_trace(events[:3], calls=1)
    assert one["launches"] == 3 and len(one["gaps_us"]) == 2


def _costed_steps(fake, monkeypatch, cost):
    """step_calls on the loop backend whose captured calls 'cost' ``cost[step]`` seconds."""
    real = layer.step_calls

    def costed(inputs, backend="pearl"):
        def charge(step, call):
            def run():
                if fake.capturing is not None:
                    fake.capturing.cost += cost[step]
                    fake.capturing.name = step
                return call()

            return run

        return {s: charge(s, c) for s, c in real(inputs, "loop").items()}

    monkeypatch.setattr(layer, "step_calls", costed)


def test_the_step_profile_times_the_whole_layer_with_its_steps_and_traces_every_graph(
    monkeypatch,
):
    """time_layer_steps with ``impls`` and ``trace``: the whole layer in a graph of its own in
    the same interleaved rounds as the steps (its outputs checked after the replays, its config
    kept), and every graph's launches traced (graph_kernels faked: one kernel a step, five a
    whole layer)."""
    fake = FakeCuda().install(monkeypatch)
    cost = {s: 1e-6 * (i + 1) for i, s in enumerate(layer.STEPS)}
    _costed_steps(fake, monkeypatch, cost)
    whole_s = 2.5e-5

    problem = layer.LayerProblem(SMALL.name, 12, ep=1)
    calls = max(4, len(layer.layer_input_sets(problem, "cpu", 200)))  # a graph's calls

    def kernels(graph, replays=2):
        count = 5 if graph.name == "whole" else 1
        return [(f"{graph.name}{k}", 10.0 * (c * count + k), 1.0)
                for c in range(replays * calls) for k in range(count)]  # fmt: skip

    monkeypatch.setattr(layer, "graph_kernels", kernels)
    timed = layer.time_layer_steps(problem, rounds=4, reps=2, launches=4, device="cpu",
                                   steps=layer.PROFILE_STEPS, trace=True,
                                   impls={"whole": _impl("whole", fake, whole_s)})  # fmt: skip
    assert list(timed) == [s for s in layer.PROFILE_STEPS if s != "gate+up (fused)"] + ["whole"]
    assert "router" not in timed  # not the layer's: the profile leaves it out
    assert timed["whole"].median_s == pytest.approx(whole_s) and timed["whole"].outputs_ok
    assert timed["whole"].config == {"seconds": whole_s}
    assert timed["whole"].trace["launches"] == 5 and timed["gather"].trace["launches"] == 1
    assert timed["whole"].trace["idle_us"] == pytest.approx(5 * 9.0)
    names = [name for name, _ in fake.replays]
    assert names.count("whole") == names.count("gather")  # the same rounds


def test_the_step_profile_command_writes_a_run_and_prints_its_table_last(
    monkeypatch, tmp_path, capsys
):
    """``layer --steps`` wired end to end with the GPU work faked: the run (kind moe_layer_steps,
    gzipped through pearl_moe.results) holds every step with its trace and the whole layer with
    its floor; the table printed last gives each step, their sum, the whole graph and the gap."""
    from pearl_moe.bench.harness import Timing

    _fake_gpu_command(monkeypatch)
    monkeypatch.setattr(layer, "check_layer",
                        lambda impls, problem, **kw: {n: (True, "ok", 1e-3) for n in impls})  # fmt: skip
    step_us = {"metadata": 2.0, "gather": 3.0, "gate+up": 40.0, "activation": 5.0, "down": 20.0,
               "combine": 2.0, "gate+up (fused)": 41.0}  # fmt: skip
    asked = []

    def fake_steps(problem, rounds=6, reps=5, steps=None, impls=None, trace=False, **kw):
        asked.append((problem.id, tuple(steps), tuple(impls), trace))
        out = {}
        for name, us in [*step_us.items(), ("pearl-fused", 75.0)]:
            t = Timing.from_rounds([[us * 1e-6]] * rounds, 10, 1)
            t.trace = {"launches": 5 if name == "pearl-fused" else 1, "idle_us": 4.0, "calls": 20}
            if name == "pearl-fused":
                t.outputs_ok = True
                t.config = {"fused": "activation in the gate+up epilogue", "backend": "pearl"}
            out[name] = t
        return out

    monkeypatch.setattr(layer, "time_layer_steps", fake_steps)
    out = tmp_path / "moe_layer_steps.json.gz"
    assert layer.main(["--steps", "--models", "vllm", "--out", str(out)]) == 0
    assert len(asked) == 15 and all(a[1:] == (layer.PROFILE_STEPS, ("pearl-fused",), True)
                                    for a in asked)  # fmt: skip
    assert {a[0].split("|")[2] for a in asked} == {"1", "16", "256"}
    run = results.read_run(out)
    assert run["kind"] == "moe_layer_steps" and "Step profile" in run["method"]
    assert len(run["problems"]) == 15
    whole = [r for r in run["records"] if r["impl"] == "pearl-fused"]
    assert len(whole) == 15 and all(r["metrics"]["floor_us"] > 0 and r["trace"]["launches"] == 5
                                    for r in whole)  # fmt: skip
    steps = [r for r in run["records"] if r["impl"].startswith("step:")]
    assert len(steps) == 15 * 7 and all("metrics" not in r and r["trace"] for r in steps)
    rows = compare.step_profile(run)
    assert rows[0]["chain"] == ["metadata", "gather", "gate+up (fused)", "down", "combine"]
    assert rows[0]["sum_us"] == pytest.approx(2 + 3 + 41 + 20 + 2)
    assert rows[0]["gap_us"] == pytest.approx(75 - 68) and rows[0]["whole_launches"] == 5
    text = capsys.readouterr().out
    table = text[text.rindex("us per call") :]
    assert "gap" in table and "whole" in table and "41.0*" in table
    assert "Qwen3-30B-A3B EP1" in table and "DeepSeek-V2 EP8" in table
    last = [line for line in table.splitlines() if line.startswith("Mixtral")][-1]
    assert last.split()[1:3] == ["EP1", "256"] and "68.0" in last and "75.0" in last
    # a step profile does not continue a layer run, nor a layer run a step profile
    with pytest.raises(ValueError, match="'moe_layer_steps' run, not 'moe_layer'"):
        layer.main(["--models", "glm", "--tokens", "1", "--out", str(out), "--resume"])


def test_step_profiles_read_the_committed_layer_run(capsys):
    """The step records the layer run already holds (H200, 1, 64 and 4096 tokens) read as a
    step profile: the fused forward's five steps sum to within a few percent of the whole layer
    at 1 token; ``bench --summarize`` prints the layer's comparison, then that table."""
    from pathlib import Path

    from pearl_moe.bench import cli

    path = Path(__file__).resolve().parent.parent / "results/H200/moe_layer.json.gz"
    rows = compare.step_profile(results.read_run(path))
    assert len(rows) == 9 and all(r["chain"] and r["tokens"] in (1, 64, 4096) for r in rows)
    one = [r for r in rows if r["tokens"] == 1]
    assert all(abs(r["gap_us"]) < 0.05 * r["whole_us"] for r in one)
    assert cli.main(["--summarize", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.index("vs quack geomean") < text.index("gap = whole - sum")


def test_forward_steps_follow_the_fused_label():
    def rec(impl, fused=None):
        return {"impl": impl, "config": {"fused": fused} if fused else {}}

    assert compare.forward_steps(rec("pearl")) == list(compare.LAYER_STEPS)
    assert "gate+up (fused)" in compare.forward_steps(
        rec("pearl-fused", "activation in the gate+up epilogue"))  # fmt: skip
    assert compare.forward_steps(rec("pearl-fused", "activation as a pass of its own")) == list(
        compare.LAYER_STEPS)  # fmt: skip
    gathered = "activation in the gate+up epilogue; x read through the gather index"
    assert compare.forward_steps(rec("pearl-gather", gathered)) == []
    assert compare.forward_steps(rec("torch")) == []


def test_the_one_launch_gather_is_one_step_of_the_profile():
    """Where the routing's launch also gathered x's rows (the label layer_impls records), the
    forward's chain has one ``metadata+gather`` step in place of two, the sum adds it once and
    the table shows it in the metadata column, marked ``+``, with no gather step."""
    from pearl_moe.bench.layer_impls import ONE_LAUNCH_GATHER

    fused = "activation in the gate+up epilogue"
    one = {"impl": "pearl-fused", "config": {"fused": fused, "gather": ONE_LAUNCH_GATHER}}
    assert compare.forward_steps(one) == ["metadata+gather", "gate+up (fused)", "down", "combine"]
    plain = {"impl": "pearl", "config": {"gather": ONE_LAUNCH_GATHER}}
    assert compare.forward_steps(plain)[:2] == ["metadata+gather", "gate+up"]
    apart = {"impl": "pearl-fused", "config": {"fused": fused, "gather": "index_select after"}}
    assert compare.forward_steps(apart)[:2] == ["metadata", "gather"]
    steps = {"metadata": 2.0, "gather": 3.0, "metadata+gather": 2.5, "gate+up (fused)": 20.0,
             "down": 12.0, "combine": 2.0}  # fmt: skip
    chain = compare.forward_steps(one)
    row = {"problem": "p", "model": "Qwen3-30B-A3B", "ep": 1, "tokens": 1, "routing": "balanced",
           "floor_us": 24.0, "chain": chain, "steps_us": steps,
           "sum_us": sum(steps[s] for s in chain), "whole_us": 37.0}  # fmt: skip
    assert row["sum_us"] == pytest.approx(36.5)
    line = compare.format_step_profile([row]).splitlines()[-1].split()
    assert line[4:7] == ["2.5+", "-", "20.0*"] and line[7] == "-" and "36.5" in line


def test_the_layers_kernels_are_precompiled_both_gemms_fused_and_not(monkeypatch):
    """Before the ceilings are probed, the kernels our forwards run on every problem compile in
    the background: the gate+up with and without the fused activation, the down GEMM, the
    gathered gate+up where pearl-gather runs; nothing where none of ours does."""
    from pearl_moe.bench import cli

    asked = []
    monkeypatch.setattr(
        cli, "pick_requests", lambda calls, device="cuda": asked.extend(calls) or []
    )
    monkeypatch.setattr(cli, "precompile_in_background", lambda requests, what: requests() or "t")
    problems = layer.layer_problems("qwen3-30b", [1, 16])
    assert layer._precompile(problems, {"pearl-fused": None, "torch": None}) == "t"
    assert asked[:3] == [(1536, 2048, 128, 8, "swiglu"), (1536, 2048, 128, 8), (2048, 768, 128, 8)]
    assert len(asked) == 12  # the pdl twins' six calls (both problems are decode), then the six
    asked.clear()
    # beyond PDL_MAX_ROWS routed rows the forward launches serially: no pdl twins asked for
    layer._precompile(layer.layer_problems("qwen3-30b", [16, 4096]), {"pearl-fused": None})
    assert len(asked) == 9 and asked[:3] == asked[3:6] and {c[3] for c in asked[:3]} == {16 * 8}
    asked.clear()
    layer._precompile(problems[:1], {"pearl-gather": None})
    assert asked[-1] == (1536, 2048, 128, 8, "swiglu", True)
    assert layer._precompile(problems, {"torch": None}) is None
    # on sm_90a each persistent kernel also as the forward launches it: with pdl
    hopper, blackwell = GemmConfig(arch="sm_90a"), GemmConfig(arch="sm_100a")
    picks = [("sm_90a", 5, hopper, 1536, 2048, 128, 132), ("sm_90a", 1, hopper, 8, 8, 2, 132),
             ("sm_100a", 5, blackwell, 1536, 2048, 128, 148)]  # fmt: skip
    monkeypatch.setattr(cli, "pick_requests", lambda calls, device="cuda": list(picks))
    requested = []
    monkeypatch.setattr(cli, "precompile_in_background",
                        lambda requests, what: requested.extend(requests()) or "t")  # fmt: skip
    layer._precompile(problems[:1], {"pearl-fused": None})
    assert requested == [*picks, ("sm_90a", 5, hopper.with_(pdl=True), 1536, 2048, 128, 132)]


def test_the_layer_registry_is_the_benchs_registry():
    """The layer's implementations are looked up like the grouped GEMMs', in a registry of their
    own kind; an unknown kind is refused."""
    assert registry.impl_names("layer") == ["pearl", "pearl-fused", "pearl-serial",
                                            "pearl-gather", "torch", "quack", "sonic"]  # fmt: skip
    assert "pearl-fused" not in registry.impl_names()  # not a grouped GEMM
    impl = layer.layer_impl("torch")
    assert impl.name == "torch" and "composition" in impl.description
    with pytest.raises(ValueError, match="kind"):
        registry.get_impl("torch", kind="attention")

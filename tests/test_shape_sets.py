"""The shape sets: tuned and held-out layers never overlap, and both cover the space of public MoE
layers that the default must serve."""

from __future__ import annotations

import math

import pytest

from pearl_moe.bench import shape_sets
from pearl_moe.workloads import MODELS, PUBLIC_MODELS


def test_the_held_out_set_shares_no_model_and_no_shape_with_the_tuning_set():
    tuning, held = shape_sets.cases("tuning"), shape_sets.cases("held-out")
    assert not {c.model for c in tuning} & {c.model for c in held}
    assert not {c.shape() for c in tuning} & {c.shape() for c in held}
    course = {c.shape() for c in shape_sets.cases("course")}
    assert not course & {c.shape() for c in held}
    assert {shape_sets.set_of(m) for m in MODELS} == {"course"}
    assert shape_sets.set_of("Mixtral-8x22B") == "held-out"
    assert shape_sets.set_of("qwen3-30b") == "tuning"
    assert set(shape_sets.TUNING_MODELS) | set(shape_sets.HELD_OUT_MODELS) == set(PUBLIC_MODELS)


def test_sets_cover_the_space_the_issue_names():
    for name in ("tuning", "held-out"):
        cases = shape_sets.cases(name)
        shapes = [c.shape() for c in cases]
        ns, ks, es = zip(*shapes, strict=True)
        assert min(ns) <= 2048 and max(ns) >= 20000, name
        assert min(ks) <= 1536 and max(ks) >= 8192, name
        assert min(es) == 8 and max(es) == 256, name
        assert {c.projection for c in cases} == {"gate_up", "down"}
        assert {c.ep for c in cases} == {1, 8}
        assert min(c.tokens for c in cases) == 1
        assert max(c.tokens for c in cases) == (8192 if name == "tuning" else 4096)
    assert len(shape_sets.cases("held-out")) >= 24
    assert len(shape_sets.cases("course")) == 21


def test_every_held_out_layer_has_tuned_neighbours():
    """Log-distance from each held-out layer's (n, k, experts) to the nearest tuned one: within
    about 1.2 octaves in every dimension, so the picker interpolates rather than extrapolates."""
    tuned = {c.shape() for c in shape_sets.cases("tuning")} | {
        c.shape() for c in shape_sets.cases("course")
    }
    for case in shape_sets.cases("held-out", tokens=(1,)):
        here = [math.log2(v) for v in case.shape()]
        nearest = min(
            max(abs(a - math.log2(b)) for a, b in zip(here, t, strict=True)) for t in tuned
        )
        assert nearest <= 1.25, (case, nearest)


def test_prefill_layers_have_tuned_neighbours_in_rows_per_expert_too():
    """At prefill (more than 256 rows per expert) the picker also weighs rows per expert: in log2
    of (n, k, experts, rows per expert), every held-out prefill layer has a tuned layer (the
    tuning set at its token counts, 8192 included, and the course's) within one octave in each
    dimension. At 4096 tokens alone Qwen2-57B-A14B's gate+up (4096 rows per expert) was 1.74
    octaves from the nearest."""

    def point(case):
        p = case.problem()
        return [math.log2(v) for v in (p.n, p.k, p.experts, p.rows / p.experts)]

    tuned = [point(c) for c in shape_sets.cases("tuning") + shape_sets.cases("course")]
    for case in shape_sets.cases("held-out"):
        here = point(case)
        if 2 ** here[3] <= 256:
            continue
        nearest = min(max(abs(a - b) for a, b in zip(here, t, strict=True)) for t in tuned)
        assert nearest <= 1.0 + 1e-9, (case.id, nearest)


def test_cases_are_ordered_by_token_count_and_build_problems():
    cases = shape_sets.cases("held-out", tokens=(16, 1))
    assert [c.tokens for c in cases[:2]] == [16, 16] and cases[-1].tokens == 1
    problem = cases[0].problem()
    assert problem.meta["model"] == cases[0].model and problem.rows == 16 * 8
    assert cases[0].id == "Qwen3-235B-A22B|gate_up|16|EP8|balanced"
    with pytest.raises(ValueError, match="unknown shape set"):
        shape_sets.cases("test")


def test_no_committed_tuning_table_holds_a_held_out_layer():
    import json

    from pearl_moe.kernels.autotune import TABLE_DIR

    held = {c.shape() for c in shape_sets.cases("held-out", tokens=(1,))}
    tables = sorted(TABLE_DIR.glob("*.json"))
    assert tables
    from pearl_moe.bench.table_studies import entry_model

    for path in tables:
        for e in json.loads(path.read_text())["entries"]:
            assert (e["n"], e["k"], e["experts"]) not in held, (path.name, e["measured_at"])
            model = entry_model(e)
            if not model.startswith("shape "):
                assert shape_sets.set_of(model) != "held-out", (path.name, e["measured_at"])


def test_every_held_out_shape_is_served_by_the_vote_not_the_heuristic():
    from pearl_moe.kernels import autotune

    autotune.use_table(None)
    for case in shape_sets.cases("held-out"):
        n, k, experts = case.shape()
        choice = autotune.pick("sm_90a", n, k, experts, case.problem().rows, gpu="H200")
        assert "vote of" in choice.source, (case.id, choice.source)


def test_the_course_set_is_the_committed_compare_runs_shapes():
    """compare_general's course part must be comparable with compare.json: the same problems."""
    from pearl_moe.results import load_run

    run = load_run("H200", "compare")
    assert {c.id for c in shape_sets.cases("course")} == {p["id"] for p in run["problems"]}


def test_the_device_script_asks_for_what_the_commands_accept():
    """scripts/general_runs.sh runs on a lent GPU with little time: its tune and bench command
    lines must parse here first, tune must not see a held-out layer, bench must judge them all."""
    import shlex
    from pathlib import Path

    from pearl_moe.bench import cli, tune

    script = Path(__file__).resolve().parent.parent / "scripts" / "general_runs.sh"
    commands, current = [], None
    for line in script.read_text().splitlines():
        line = line.strip()
        if line.startswith("python3 -m pearl_moe "):
            current = line
        elif current is not None:
            current = current[:-1] + " " + line
        if current is not None and not current.endswith("\\"):
            commands.append(current)
            current = None
    assert len(commands) == 5
    commands = [c.replace('"$set"', name) for c in commands for name in ("course", "tuning")
                if '"$set"' in c or name == "course"]  # fmt: skip
    assert len(commands) == 6
    for command in commands:
        command = command.replace('"$deadline"', "370")
        command = command.replace('"$MIDSIZE_SINCE"', "2026-12-06T11:00:00+00:00")
        command = command.replace('"${COMPARE_SET:-held-out,course}"', "held-out,course")
        command = command.replace('"$@"', "").replace("$gpu", "H200")
        words = shlex.split(command.replace("$DEADLINE_S", "470").replace("$OUT", "/tmp/x"))
        module = {"tune": tune, "bench": cli}[words[3]]
        args = module.parse_args(words[4:])
        problems = module.build_problems(args)
        if module is tune:
            from pearl_moe.bench import candidates
            from pearl_moe.kernels import autotune

            assert problems and not tune.held_out_problems(problems)
            if args.at_most_rows_per_expert is not None:  # midsize: 128-256 rows per expert
                band = (candidates.CLUSTER_ROWS, candidates.PREFILL_ROWS)
                assert (args.above_rows_per_expert, args.at_most_rows_per_expert) == band
                assert all(band[0] < p.rows / p.experts <= band[1] for p in problems)
                assert args.limit == 49 and not args.skip_tuned
                assert args.skip_tuned_since == "2026-12-06T11:00:00+00:00"  # continues
                if args.set == "course":  # the course's 1024-token layers
                    assert {p.name for p in problems} == {
                        f"{m} gate_up 1024 tok/GPU EP8 balanced"
                        for m in ("GLM 5.3", "Kimi K3", "DeepSeek V4 Pro")
                    }
                else:
                    assert args.set == "tuning" and len(problems) == 18
                continue
            assert args.set == "tuning"

            prefill = all(p.rows / p.experts > candidates.PREFILL_ROWS for p in problems)
            tokens = {p.meta["tokens_per_gpu"] for p in problems}
            if args.skip_tuned and not prefill:  # the tuning set's first pass, up to 4096 tokens
                assert len(problems) == len(shape_sets.cases("tuning", shape_sets.TUNING_TOKENS))
                continue
            if args.skip_tuned:  # the 8192-token shapes, all prefill, over the whole space
                assert tokens == set(shape_sets.TUNING_PREFILL_TOKENS) and len(problems) == 14
                assert args.limit == 49
                continue
            # the prefill pass: the limit keeps each shape's committed winner and the 128 x 128
            # split-accumulator tile in the candidates (it must not lose what the first pass found)
            assert tokens == {1024, 4096} and prefill
            assert len(problems) == 14  # the tuning set's prefill shapes up to 4096 tokens
            table = autotune.load_table("H200")
            for p in problems:
                timed = candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, args.limit)
                labels = {f"s{st} {c.describe()}" for st, c in timed}
                bucket = autotune.rows_bucket(p.rows, p.experts)
                entry = autotune.table_choice("sm_90a", p.n, p.k, p.experts, bucket, "H200")
                assert entry is not None and f"s{entry.stage} {entry.config.describe()}" in labels
                assert any("128x128x64" in lb and "pingpong" in lb for lb in labels), p.name
            assert table is not None
        else:
            assert args.resume and args.remeasure_changed and args.kind == "compare_general"
            assert {p.meta["model"] for p in problems} >= set(shape_sets.HELD_OUT_MODELS)
            assert len(problems) == len(shape_sets.cases("held-out")) + 21

"""Ratios inside one recorded run: our kernel against the best baseline, and stage against stage.

Everything here reads a run dict (:mod:`pearl_moe.results`), so it works on a CPU from a
committed file as well as at the end of a live run::

    python -m pearl_moe bench --summarize results/H200/compare.json.gz
    python -m pearl_moe bench --summarize results/H200/ablation.json.gz

**Paired ratios.** The implementations of one problem are timed in interleaved rounds
(:func:`pearl_moe.bench.harness.time_interleaved`), and each record keeps the median of every round
(``time.round_median_us``). The ratio of two implementations is taken round by round: a drift
during the run (clock, temperature, a neighbour on the machine) moves both implementations of a
round alike and cancels in their ratio. What is left is the drift *within* a round, which favours
whichever of the two was timed first; the order rotates from round to round, so that error changes
sign, and the estimate is the geometric mean of the per-round ratios with the highest and lowest
dropped (from 5 rounds on: one bad round cannot move it), not their median (with an odd number of
rounds the median would take the side that came first more often). The spread is the range of the
per-round ratios. Records without rounds (runs before this method) fall back to the ratio of the
medians, with no spread.

* :func:`compare_summary` / :func:`format_compare`: per shape, our time / the best baseline's time
  (which baseline), % of the floor of both, the geomean ratio and the worst shape, the decode
  speed-up over tuned quack, and the run's measured read ceiling beside the datasheet's.
* :func:`ablation_summary` / :func:`format_ablation`: every course stage against the previous one.
* :func:`layer_summary` / :func:`format_layer_summary`: a whole MoE layer run
  (:mod:`pearl_moe.bench.layer`): ours against its floor and every other implementation, and the
  layer benchmark's goals; :func:`step_profile` / :func:`format_step_profile`: where our layer's
  time goes, step by step, beside the whole layer's graph (the gap between them: the launches);
  :func:`cross_run_ratios`: ours against an implementation timed in a run of its own (SonicMoE).
"""

from __future__ import annotations

import math
import re

__all__ = [
    "by_tokens",
    "changed_picks",
    "paired_ratio",
    "compare_summary",
    "format_compare",
    "ablation_summary",
    "format_ablation",
    "step_summary",
    "step_geomeans",
    "geomean",
    "layer_summary",
    "format_layer_summary",
    "cross_run_ratios",
    "forward_steps",
    "step_profile",
    "format_step_profile",
    "layer_text",
    "DECODE_TOKENS",
    "FLOOR_GOAL",
    "TORCH_GOAL",
    "QUACK_GEOMEAN_GOAL",
]

#: A shape counts as lost when ours is slower than the best baseline by more than this factor.
TIE = 1.03


def geomean(values) -> float:
    values = [v for v in values if v and v > 0]
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def paired_ratio(num: dict, den: dict) -> dict:
    """Time of record ``num`` over time of record ``den`` (both ``ok``, same problem, same run).

    ``{"ratio", "lo", "hi", "rounds"}``: the trimmed geometric mean of the per-round ratios and
    their range when both records have the same number (>= 2) of round medians (see the module
    docstring); else the ratio of the medians.
    """
    a = num["time"].get("round_median_us") or []
    b = den["time"].get("round_median_us") or []
    if len(a) >= 2 and len(a) == len(b):
        per_round = [x / y for x, y in zip(a, b, strict=True)]
        kept = sorted(per_round)[1:-1] if len(per_round) >= 5 else per_round
        return {
            "ratio": geomean(kept),
            "lo": min(per_round),
            "hi": max(per_round),
            "rounds": len(per_round),
        }
    ratio = num["time"]["median_us"] / den["time"]["median_us"]
    return {"ratio": ratio, "lo": ratio, "hi": ratio, "rounds": 1}


def _ok_records(run: dict) -> dict:
    return {(r["problem"], r["impl"]): r for r in run["records"] if r.get("status") == "ok"}


def _datasheet_read(run: dict) -> tuple[str | None, float | None]:
    from ..hardware import get_gpu

    try:
        gpu = get_gpu(run["env"].get("gpu") or "")
    except ValueError:
        return None, None
    return gpu.name, gpu.hbm_bytes_per_s


def _ceilings(run: dict) -> dict:
    c = run["ceilings"]
    name, sheet = _datasheet_read(run)
    out = {
        "read_tb_s": c["read_bytes_per_s"] / 1e12,
        "read_probe_tb_s": c.get("read_probe_bytes_per_s", c["read_bytes_per_s"]) / 1e12,
        "read_source": c.get("read_ceiling_source", ""),
        "bf16_tflop_s": c["bf16_flops_per_s"] / 1e12,
        "datasheet_gpu": name,
        "datasheet_read_tb_s": sheet / 1e12 if sheet else None,
    }
    if sheet:
        out["read_pct_of_datasheet"] = 100.0 * c["read_bytes_per_s"] / sheet
    return out


def _is_ours(name: str) -> bool:
    return name == "pearl" or name.startswith("pearl-")


def compare_summary(
    run: dict,
    ours: str = "pearl",
    baselines: list[str] | None = None,
    decode_max_tokens: int = 256,
    quack: str = "quack-tuned",
    tie: float = TIE,
) -> dict:
    """Our implementation against the best baseline on every problem of ``run``.

    ``baselines`` defaults to every implementation in the run that is not one of ours (``pearl``,
    ``pearl-*``). Per problem: ``ratio`` (paired, :func:`paired_ratio`) of ours over the fastest
    baseline by median, which one it was, and % of floor of both. Overall: geomean and worst ratio,
    shapes above ``tie``, and at decode (``tokens_per_gpu <= decode_max_tokens``) the geomean
    speed-up over ``quack`` where both ran."""
    recs = _ok_records(run)
    impls = list(dict.fromkeys(r["impl"] for r in run["records"]))
    if baselines is None:
        baselines = [i for i in impls if not _is_ours(i)]
    rows = []
    for p in run["problems"]:
        pid = p["id"]
        row = {
            "problem": pid,
            "model": p.get("model"),
            "projection": p.get("projection", "gate_up"),
            "set": _set_of(p.get("model")),
            "tokens": p.get("tokens_per_gpu"),
            "routing": p.get("routing"),
            "floor_us": p.get("floor_us"),
        }
        mine = recs.get((pid, ours))
        rivals = [recs[(pid, b)] for b in baselines if (pid, b) in recs]
        if mine is not None:
            row["ours_us"] = mine["time"]["median_us"]
            row["ours_pct_floor"] = mine["metrics"]["pct_of_floor"]
            row["ours_spread_pct"] = mine["time"].get("range_pct")
            row["ours_config"] = mine.get("config", {}).get("config")
        if rivals:
            best = min(rivals, key=lambda r: r["time"]["median_us"])
            row["best"] = best["impl"]
            row["best_us"] = best["time"]["median_us"]
            row["best_pct_floor"] = best["metrics"]["pct_of_floor"]
        if mine is not None and rivals:
            row.update(paired_ratio(mine, best))
        q = recs.get((pid, quack))
        if mine is not None and q is not None:
            row["vs_quack"] = paired_ratio(q, mine)["ratio"]  # > 1: ours is faster
        rows.append(row)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    worst = max((r for r in rows if "ratio" in r), key=lambda r: r["ratio"], default=None)
    decode = [
        r["vs_quack"]
        for r in rows
        if "vs_quack" in r and r["tokens"] is not None and r["tokens"] <= decode_max_tokens
    ]
    return {
        "ours": ours,
        "baselines": baselines,
        "tie": tie,
        "rows": rows,
        "compared": len(ratios),
        "geomean_ratio": geomean(ratios),
        "worst": {"problem": worst["problem"], "ratio": worst["ratio"], "best": worst["best"]}
        if worst
        else None,
        "above_tie": [r["problem"] for r in rows if r.get("ratio", 0) > tie],
        "missing": [r["problem"] for r in rows if "ratio" not in r],
        "decode_vs_quack": {
            "quack": quack,
            "max_tokens": decode_max_tokens,
            "shapes": len(decode),
            "geomean_speedup": geomean(decode),
        },
        "by_set": _by_set(rows, tie),
        "ceilings": _ceilings(run),
        "scheduler": _scheduler(run),
    }


def _set_of(model: str | None) -> str:
    """The shape set of a problem's model (:mod:`pearl_moe.bench.shape_sets`): "course", "tuning",
    "held-out", or "other" (a layer given by its shape, or a model no set names)."""
    from .shape_sets import set_of

    try:
        return (set_of(model) if model else None) or "other"
    except ValueError:
        return "other"


def _by_set(rows: list[dict], tie: float) -> dict:
    """Geomean and worst ratio per shape set, so that a run over course and held-out shapes
    reports each on its own (a default tuned on one set is judged on the other).
    ``geomean_losses_tied`` is the geomean with every ratio above 1 counted as 1: what the set
    would score had each loss been brought level and no win added, so a bar below it can only
    be met by beating the best baseline, not by ceasing to lose to it."""
    out = {}
    for name in dict.fromkeys(r["set"] for r in rows):
        ratios = [r for r in rows if r["set"] == name and "ratio" in r]
        if not ratios:
            continue
        worst = max(ratios, key=lambda r: r["ratio"])
        out[name] = {
            "compared": len(ratios),
            "geomean_ratio": geomean([r["ratio"] for r in ratios]),
            "geomean_losses_tied": geomean([min(r["ratio"], 1.0) for r in ratios]),
            "worst": {"problem": worst["problem"], "ratio": worst["ratio"], "best": worst["best"]},
            "above_tie": [r["problem"] for r in ratios if r["ratio"] > tie],
        }
    return out


def by_tokens(summary: dict, shape_set: str) -> list[dict]:
    """One set's shapes grouped by tokens per GPU: ``[{tokens, compared, geomean_ratio, worst,
    above_tie, wins}]``, ``wins`` counting which baseline was fastest (so a reader sees where the
    default loses: decode against Triton, prefill against quack)."""
    rows = [r for r in summary["rows"]
            if r["set"] == shape_set and "ratio" in r and r["tokens"] is not None]  # fmt: skip
    out = []
    for tokens in sorted({r["tokens"] for r in rows}):
        group = [r for r in rows if r["tokens"] == tokens]
        worst = max(group, key=lambda r: r["ratio"])
        wins: dict[str, int] = {}
        for r in group:
            wins[r["best"]] = wins.get(r["best"], 0) + 1
        out.append({
            "tokens": tokens, "compared": len(group),
            "geomean_ratio": geomean([r["ratio"] for r in group]),
            "worst": {"problem": worst["problem"], "ratio": worst["ratio"], "best": worst["best"]},
            "above_tie": [r["problem"] for r in group if r["ratio"] > summary["tie"]],
            "wins": dict(sorted(wins.items(), key=lambda kv: -kv[1])),
        })  # fmt: skip
    return out


def changed_picks(run: dict, ours: str = "pearl", gpu: str | None = None) -> list[dict]:
    """Problems of ``run`` where the default call would now pick another configuration than the
    one the run timed (the table or the picker changed since): ``[{problem, timed, now}]``. Runs
    on a CPU (:func:`pearl_moe.kernels.autotune.pick` reads the committed table); a run whose
    records name no configuration gives none."""
    from ..kernels import autotune

    gpu = gpu or autotune.short_gpu_name(run.get("env", {}).get("gpu") or "H200")
    timed = {
        r["problem"]: (r.get("config") or {}).get("config")
        for r in run["records"]
        if r["impl"] == ours and r.get("status") == "ok"
    }
    out = []
    for p in run["problems"]:
        label = timed.get(p["id"])
        if not label or not all(key in p for key in ("n", "k", "experts", "rows")):
            continue
        arch = label.split()[0]
        now = autotune.pick(arch, p["n"], p["k"], p["experts"], p["rows"], gpu).config.describe()
        if now != label:
            out.append({"problem": p["id"], "timed": label, "now": now})
    return out


def _scheduler(run: dict) -> str:
    from ..results import run_scheduler

    try:
        walk, why = run_scheduler(run)
    except (KeyError, ValueError):
        return "unknown"
    return f"{walk} walk ({why})"


def _short(model: str | None, projection: str | None = None) -> str:
    name = {"GLM 5.3": "GLM 5.3", "DeepSeek V4 Pro": "V4 Pro", "Kimi K3": "Kimi K3"}.get(
        model or "", (model or "?")[:15]
    )
    return f"{name} down" if projection == "down" else name


def format_compare(summary: dict) -> str:
    """The ratio table: one line per shape, then the totals and the ceilings."""
    ours = summary["ours"]
    head = (
        f"{'model':<21}{'tok':>5} {'routing':<9}{'floor':>8}{ours + ' us':>12}{'%fl':>5}"
        f"{'best baseline':>24}{'%fl':>5}{'ratio':>7}  {'rounds lo-hi':<13}{'vs quack-t':>10}"
    )
    lines = [f"ratio = {ours} / best baseline, same run (paired per round); <1: ours faster", head]
    lines.append("-" * len(head))
    for r in summary["rows"]:
        line = f"{_short(r['model'], r.get('projection')):<21}{r['tokens'] or 0:>5} "
        line += f"{r['routing'] or '':<9}"
        line += f"{r['floor_us'] or float('nan'):>8.1f}"
        line += (
            f"{r['ours_us']:>12.1f}{r['ours_pct_floor']:>5.0f}" if "ours_us" in r else f"{'-':>17}"
        )
        if "best_us" in r:
            line += (
                f"{r['best'] + ' ' + format(r['best_us'], '.1f'):>24}{r['best_pct_floor']:>5.0f}"
            )
        else:
            line += f"{'-':>29}"
        if "ratio" in r:
            flag = " !" if r["ratio"] > summary["tie"] else ""
            line += f"{r['ratio']:>7.3f}  {r['lo']:.3f}-{r['hi']:.3f}{flag:<2}"
        else:
            line += f"{'-':>7}  {'':<13}"
        line += f"{r['vs_quack']:>9.2f}x" if "vs_quack" in r else ""
        lines.append(line)
    lines.append("")
    worst = summary["worst"]
    lines.append(
        f"{summary['compared']} shapes compared: geomean ratio {summary['geomean_ratio']:.3f}"
        + (
            f", worst {worst['ratio']:.3f} ({worst['problem']}, vs {worst['best']})"
            if worst
            else ""
        )
        + f"; above {summary['tie']:.2f}: {len(summary['above_tie'])}"
    )
    by_set = summary.get("by_set") or {}
    if len(by_set) > 1:
        for name, g in by_set.items():
            lines.append(
                f"  {name}: {g['compared']} shapes, geomean {g['geomean_ratio']:.3f} "
                f"({g['geomean_losses_tied']:.3f} with losses as ties), worst "
                f"{g['worst']['ratio']:.3f} ({g['worst']['problem']}); above "
                f"{summary['tie']:.2f}: {len(g['above_tie'])}"
            )
    if summary.get("missing"):
        lines.append(
            f"not compared ({ours} or every baseline failed or did not run): "
            + ", ".join(summary["missing"])
        )
    d = summary["decode_vs_quack"]
    if d["shapes"]:
        lines.append(
            f"decode (<= {d['max_tokens']} tokens): {d['geomean_speedup']:.2f}x faster than "
            f"{d['quack']} (geomean over {d['shapes']} shapes where both ran)"
        )
    else:
        lines.append(f"decode: no shape where both {ours} and {d['quack']} ran")
    c = summary["ceilings"]
    sheet = (
        f"; datasheet {c['datasheet_gpu']} {c['datasheet_read_tb_s']:.2f} TB/s "
        f"(measured = {c['read_pct_of_datasheet']:.0f}% of it)"
        if c.get("datasheet_read_tb_s")
        else ""
    )
    lines.append(
        f"read ceiling of this run {c['read_tb_s']:.2f} TB/s (probes {c['read_probe_tb_s']:.2f})"
        f"{sheet}; bf16 {c['bf16_tflop_s']:.0f} TFLOP/s"
    )
    if summary.get("scheduler"):
        lines.append(f"tile scheduler of our kernels in this run: {summary['scheduler']}")
    return "\n".join(lines)


_STAGE = re.compile(r"^pearl-s(\d+)$")


def ablation_summary(run: dict, chain: list[str] | None = None) -> dict:
    """Each course stage against the previous one that ran, on every problem of ``run``.

    ``chain`` defaults to the ``pearl-sN`` implementations of the run with N >= 3, in stage order.
    Per problem and stage: median, spread (``range_pct`` of the round medians), the paired ratio
    to the previous stage that ran on that problem (< 1: the stage made it faster), and the
    configuration. Per step: the geomean of those ratios over problems."""
    recs = _ok_records(run)
    if chain is None:
        stages = sorted({int(m.group(1)) for r in run["records"] if (m := _STAGE.match(r["impl"]))})
        chain = [f"pearl-s{s}" for s in stages if s >= 3]
    status = {(r["problem"], r["impl"]): r.get("status") for r in run["records"]}
    rows = []
    steps: dict = {}
    for p in run["problems"]:
        pid = p["id"]
        cells = []
        prev = None
        for impl in chain:
            rec = recs.get((pid, impl))
            cell = {"impl": impl, "status": status.get((pid, impl), "-")}
            if rec is not None:
                cell["median_us"] = rec["time"]["median_us"]
                cell["spread_pct"] = rec["time"].get("range_pct")
                cell["pct_floor"] = rec["metrics"]["pct_of_floor"]
                cell["config"] = rec.get("config", {}).get("config")
                if prev is not None:
                    pr = paired_ratio(rec, prev)
                    cell.update(vs=prev["impl"], **pr)
                    steps.setdefault((prev["impl"], impl), []).append(pr["ratio"])
                prev = rec
            cells.append(cell)
        rows.append(
            {
                "problem": pid,
                "model": p.get("model"),
                "tokens": p.get("tokens_per_gpu"),
                "routing": p.get("routing"),
                "floor_us": p.get("floor_us"),
                "cells": cells,
            }
        )
    return {
        "chain": chain,
        "rows": rows,
        "steps": [
            {"from": a, "to": b, "shapes": len(v), "geomean_ratio": geomean(v)}
            for (a, b), v in steps.items()
        ],
    }


def format_ablation(summary: dict) -> str:
    chain = summary["chain"]
    head = f"{'model':<9}{'tok':>5} {'routing':<9}{'floor':>8}" + "".join(f"{c:>22}" for c in chain)
    lines = [
        "each stage: median us (ratio to the previous stage that ran, paired per round; "
        "<1 faster) [round range %]",
        head,
        "-" * len(head),
    ]
    for r in summary["rows"]:
        line = f"{_short(r['model']):<9}{r['tokens'] or 0:>5} {r.get('routing') or '':<9}"
        line += f"{r['floor_us'] or float('nan'):>8.1f}"
        for cell in r["cells"]:
            if "median_us" in cell:
                text = f"{cell['median_us']:.1f}"
                if "ratio" in cell:
                    text += f" ({cell['ratio']:.3f})"
                if cell.get("spread_pct") is not None:
                    text += f" [{cell['spread_pct']:.1f}]"
            else:
                text = cell["status"]
            line += f"{text:>22}"
        lines.append(line)
    lines.append("")
    for s in summary["steps"]:
        lines.append(
            f"{s['from']} -> {s['to']}: geomean ratio {s['geomean_ratio']:.3f} "
            f"over {s['shapes']} shapes"
        )
    return "\n".join(lines)


def step_geomeans(cells, decode_max_tokens: int = 256, verdict=None) -> dict:
    """The geomean of one step's paired ratios (stage N over stage N-1, :func:`paired_ratio`) over
    ``all`` shapes, the ``decode`` shapes (``tokens <= decode_max_tokens``) and the ``prefill``
    ones. ``cells`` are mappings with ``tokens`` and, where the two stages were compared, ``ratio``,
    ``lo`` and ``hi`` (the range of the per-round ratios); cells without a ratio are left out.

    Each part is ``{"shapes", "geomean", "lo", "hi", "rounds_lo", "rounds_hi", "tokens"}``: the
    geomean and range of the per-shape ratios, the widest range of the per-round ratios of any one
    shape, the token counts. ``verdict`` (a function of a cell) adds the counts of the cells it
    calls ``"faster"`` and ``"slower"``. A part without shapes has ``shapes`` 0 and None values.
    The course's steps (:func:`pearl_moe.course.measurements.ablation_step`) and the bench's
    (:func:`step_summary`, the README's stage table) both come from here."""
    compared = [c for c in cells if "ratio" in c]

    def part(chosen) -> dict:
        ratios = [c["ratio"] for c in chosen]
        out = {
            "shapes": len(chosen),
            "geomean": geomean(ratios) if chosen else None,
            "lo": min(ratios, default=None),
            "hi": max(ratios, default=None),
            "rounds_lo": min((c["lo"] for c in chosen), default=None),
            "rounds_hi": max((c["hi"] for c in chosen), default=None),
            "tokens": sorted({c["tokens"] or 0 for c in chosen}),
        }
        if verdict is not None:
            said = [verdict(c) for c in chosen]
            out.update(faster=said.count("faster"), slower=said.count("slower"))
        return out

    return {
        "all": part(compared),
        "decode": part([c for c in compared if (c["tokens"] or 0) <= decode_max_tokens]),
        "prefill": part([c for c in compared if (c["tokens"] or 0) > decode_max_tokens]),
    }


def step_summary(
    summary: dict, decode_max_tokens: int = 256, routing: str | None = "balanced"
) -> list[dict]:
    """One entry per step of an :func:`ablation_summary`: the geomean of the paired ratios over
    every problem, over decode problems (``tokens <= decode_max_tokens``) and over the others
    (prefill), each with the range of the per-problem ratios (``lo``, ``hi``) and the widest
    range of the per-round ratios of any one problem (``rounds_lo``, ``rounds_hi``)
    (:func:`step_geomeans`; a part without problems is left out). Only problems with ``routing``
    (all problems with ``None``)."""
    out = []
    for step in summary["steps"]:
        cells = []
        for row in summary["rows"]:
            if routing is not None and row.get("routing") != routing:
                continue
            for cell in row["cells"]:
                if cell["impl"] == step["to"] and cell.get("vs") == step["from"]:
                    cells.append({**cell, "tokens": row["tokens"]})
        entry = {"from": step["from"], "to": step["to"]}
        for part, g in step_geomeans(cells, decode_max_tokens).items():
            if g["shapes"]:
                entry[part] = g
        out.append(entry)
    return out


# ------------------------------------------------------------------------------------ the layer
#: The layer benchmark's goals: at decode (up to DECODE_TOKENS tokens per GPU) the fused layer
#: within FLOOR_GOAL x its floor and at least TORCH_GOAL x faster than the torch composition;
#: over every shape a geometric mean of at most QUACK_GEOMEAN_GOAL against quack's composition,
#: and no shape above :data:`TIE` (what one run resolves).
DECODE_TOKENS = 256
FLOOR_GOAL = 1.10
TORCH_GOAL = 1.5
QUACK_GEOMEAN_GOAL = 0.95


def _is_step(impl: str) -> bool:
    return impl.startswith("step:")


def layer_summary(run: dict, ours: str = "pearl-fused") -> dict:
    """Per problem of a layer run, ``ours`` against the floor and against each other
    implementation (ratios paired round by round, :func:`paired_ratio`), and the goals judged
    over the run. ``{"rows": [...], "goals": {...}, "impls": [...]}``; a goal is None where the
    run has nothing to judge it on. The steps of our forward (``step:<name>``) are not
    implementations of the layer: :func:`step_profile` reads them."""
    ok = _ok_records(run)
    others = sorted({i for _, i in ok if i != ours and not _is_step(i)})
    rows = []
    for p in run["problems"]:
        mine = ok.get((p["id"], ours))
        row = {"problem": p["id"], "model": p["model"], "tokens": p["tokens_per_gpu"],
               "routing": p["routing"], "floor_us": p.get("floor_us"), "us": {}, "vs": {}}  # fmt: skip
        for impl in [ours, *others]:
            rec = ok.get((p["id"], impl))
            if rec is not None:
                row["us"][impl] = rec["time"]["median_us"]
                if mine is not None and impl != ours:
                    row["vs"][impl] = paired_ratio(mine, rec)
        if mine is not None and row["floor_us"]:
            row["of_floor"] = mine["time"]["median_us"] / row["floor_us"]
        rows.append(row)
    decode = [r for r in rows if r["tokens"] <= DECODE_TOKENS and "of_floor" in r]
    vs_quack = [r["vs"]["quack"]["ratio"] for r in rows if "quack" in r["vs"]]
    vs_torch = [r["vs"]["torch"]["ratio"] for r in decode if "torch" in r["vs"]]
    goals = {
        "decode_worst_of_floor": max((r["of_floor"] for r in decode), default=None),
        "quack_geomean": geomean(vs_quack) if vs_quack else None,
        "quack_worst": max(vs_quack, default=None),
        "quack_above_tie": sum(v > TIE for v in vs_quack),
        "quack_shapes": len(vs_quack),
        "decode_speedup_over_torch": 1 / geomean(vs_torch) if vs_torch else None,
        "missing": [r["problem"] for r in rows if ours not in r["us"]],
    }
    g = goals
    goals["met"] = {
        "floor": None if g["decode_worst_of_floor"] is None
        else g["decode_worst_of_floor"] <= FLOOR_GOAL,
        "quack": None if g["quack_geomean"] is None
        else g["quack_geomean"] <= QUACK_GEOMEAN_GOAL and g["quack_above_tie"] == 0,
        "torch": None if g["decode_speedup_over_torch"] is None
        else g["decode_speedup_over_torch"] >= TORCH_GOAL,
    }  # fmt: skip
    return {"rows": rows, "goals": goals, "impls": [ours, *others], "ours": ours}


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_layer_summary(summary: dict) -> str:
    """:func:`layer_summary` as text: per problem the floor, every implementation's median (ours
    as a multiple of the floor too) and ours / each other, then the goals."""
    ours, others = summary["ours"], summary["impls"][1:]
    head = (
        f"{'layer':<20}{'tok':>5} {'routing':<9}{'floor':>8}{ours:>20}"
        + "".join(f"{o:>14}" for o in others)
        + "".join(f"{'/' + o:>14}" for o in others)
    )
    lines = [f"us (median); {ours} also x its floor; /X: {ours} / X, paired per round", head,
             "-" * len(head)]  # fmt: skip
    for r in summary["rows"]:
        mine = r["us"].get(ours)
        cell = "-" if mine is None else f"{mine:.1f} ({_num(r.get('of_floor'), '.2f')}x)"
        line = f"{r['model'][:19]:<20}{r['tokens']:>5} {r['routing']:<9}"
        line += f"{_num(r['floor_us'], '.1f'):>8}{cell:>20}"
        line += "".join(f"{_num(r['us'].get(o), '.1f'):>14}" for o in others)
        line += "".join(f"{_num(r['vs'].get(o, {}).get('ratio'), '.3f'):>14}" for o in others)
        lines.append(line)
    g = summary["goals"]
    verdict = {True: "met", False: "NOT met", None: "not judged"}
    lines += [
        "",
        f"decode (<= {DECODE_TOKENS} tokens) within {FLOOR_GOAL:.2f}x the floor: worst "
        f"{_num(g['decode_worst_of_floor'], '.3f')}x, {verdict[g['met']['floor']]}; vs quack "
        f"geomean <= {QUACK_GEOMEAN_GOAL:.2f}, none above {TIE:.2f}: "
        f"{_num(g['quack_geomean'], '.3f')}, {g['quack_above_tie']} of {g['quack_shapes']} "
        f"above, {verdict[g['met']['quack']]}; decode >= {TORCH_GOAL:.1f}x faster than torch: "
        f"{_num(g['decode_speedup_over_torch'], '.2f')}x, {verdict[g['met']['torch']]}",
    ]
    if g["missing"]:
        lines.append(f"{ours} not measured on: " + ", ".join(g["missing"]))
    return "\n".join(lines)


def cross_run_ratios(run: dict, other: dict, impl: str, ours: str = "pearl-fused") -> list[dict]:
    """Per problem both layer runs measured, ``ours`` in ``run`` against ``impl`` in ``other`` (a
    run in another environment, such as SonicMoE's): the ratio of the two medians. Not paired
    round by round, so it resolves less than a ratio within one run (the same kernel moved up to
    7% between batches of runs on the H200, ``experiments/reproducibility``); each row also gives
    the ratios of the two runs' read and bf16 ceilings, what the machine did between them. Runs
    on different GPUs are refused."""

    def times(r, name):
        return {rec["problem"]: rec["time"]["median_us"] for rec in r["records"]
                if rec["impl"] == name and rec.get("status") == "ok"}  # fmt: skip

    if run["env"].get("gpu") != other["env"].get("gpu"):
        raise ValueError(
            f"runs on different GPUs ({run['env'].get('gpu')} and {other['env'].get('gpu')}): "
            "their times do not compare"
        )
    mine, theirs = times(run, ours), times(other, impl)
    ceilings = {key: other["ceilings"][key] / run["ceilings"][key]
                for key in ("read_bytes_per_s", "bf16_flops_per_s")}  # fmt: skip
    return [{"problem": p["id"], "model": p["model"], "tokens": p["tokens_per_gpu"],
             "routing": p["routing"], "ours_us": mine[p["id"]], "theirs_us": theirs[p["id"]],
             "ratio": mine[p["id"]] / theirs[p["id"]],
             "read_ceiling_ratio": ceilings["read_bytes_per_s"],
             "bf16_ceiling_ratio": ceilings["bf16_flops_per_s"]}
            for p in run["problems"] if p["id"] in mine and p["id"] in theirs]  # fmt: skip


#: The steps of our layer's forward, in order (:func:`pearl_moe.bench.layer.step_calls`): the
#: columns of :func:`format_step_profile`. ``gate+up (fused)`` is gate+up with the activation in
#: its epilogue (the forward then has no activation step).
LAYER_STEPS = ("metadata", "gather", "gate+up", "activation", "down", "combine")


def forward_steps(record: dict) -> list[str]:
    """The steps a layer record's forward ran, whose step times add up to it, read from its
    config's ``fused`` and ``gather`` labels (:mod:`pearl_moe.bench.layer_impls` writes them):
    ``pearl`` runs every step of :data:`LAYER_STEPS`, and so does ``pearl-fused`` where the label
    says the activation ran as a pass of its own; else ``pearl-fused`` runs the fused gate+up and
    no activation. Where the gather ran in the routing metadata's launch, one ``metadata+gather``
    step stands for ``metadata`` and ``gather``.
    Empty for an implementation that is not cut into those steps (``pearl-gather``, theirs)."""
    config = record.get("config") or {}
    fused = config.get("fused", "")
    if record["impl"] == "pearl" or fused.startswith("activation as a pass"):
        steps = list(LAYER_STEPS)
    elif record["impl"] == "pearl-fused" and fused.startswith("activation in the gate+up epilogue"):
        steps = ["metadata", "gather", "gate+up (fused)", "down", "combine"]
    else:
        return []
    if config.get("gather", "").startswith("in the routing metadata's launch"):
        steps[:2] = ["metadata+gather"]  # one launch for both
    return steps


def step_profile(run: dict, ours: str = "pearl-fused") -> list[dict]:
    """Where the time of our layer goes, per problem of a layer run that timed its steps
    (``step:<name>`` records, each step in a CUDA graph of its own): each step's median, the sum
    of the steps ``ours`` ran (:func:`forward_steps`), ``ours``' whole-layer median and the gap,
    whole - sum: what the launches between the steps cost inside one graph (and any overlap of
    one step's tail with the next, which makes it smaller). Where the records hold kernel traces
    (``trace``, the step profile of ``python -m pearl_moe layer --steps``), also the launches of
    ours' forward and the idle time the profiler saw between them. Problems without steps are
    left out."""
    ok = _ok_records(run)
    out = []
    for p in run["problems"]:
        steps = {r[1][5:]: rec for r, rec in ok.items() if r[0] == p["id"] and _is_step(r[1])}
        if not steps:
            continue
        whole = ok.get((p["id"], ours))
        chain = forward_steps(whole) if whole else []
        row = {"problem": p["id"], "model": p["model"], "ep": p.get("ep"),
               "tokens": p["tokens_per_gpu"], "routing": p["routing"],
               "floor_us": p.get("floor_us"), "chain": chain,
               "steps_us": {s: rec["time"]["median_us"] for s, rec in steps.items()},
               "launches": {s: (rec.get("trace") or {}).get("launches") for s, rec in steps.items()}}  # fmt: skip
        if chain and all(s in steps for s in chain):
            row["sum_us"] = sum(row["steps_us"][s] for s in chain)
        if whole is not None:
            row["whole_us"] = whole["time"]["median_us"]
            trace = whole.get("trace") or {}
            row["whole_launches"], row["idle_us"] = trace.get("launches"), trace.get("idle_us")
            if "sum_us" in row:
                row["gap_us"] = row["whole_us"] - row["sum_us"]
        out.append(row)
    return out


def format_step_profile(rows: list[dict], ours: str = "pearl-fused") -> str:
    """:func:`step_profile` as text: one line per problem, the steps in forward order (gate+up:
    the fused one where ours fused it, marked ``*``, and then no activation; metadata: the one
    launch that also gathers where ours ran it, marked ``+``, and then no gather step), their
    sum, the whole layer's graph, the gap, and from the trace the launches and idle time per
    forward."""
    head = (f"{'layer':<24}{'tok':>5}{'floor':>8}" + "".join(f"{s:>11}" for s in LAYER_STEPS)
            + f"{'sum':>9}{'whole':>9}{'gap':>8}{'launches':>9}{'idle':>7}")  # fmt: skip
    lines = [f"us per call (medians); whole: {ours}'s forward in one CUDA graph; gap = whole - "
             "sum of its steps; launches and idle (between kernels): profiled replays; * the "
             "activation in gate+up's epilogue, + the gather in the metadata's launch", head,
             "-" * len(head)]  # fmt: skip
    for r in rows:
        fused = "gate+up (fused)" in r["chain"]
        one_launch = "metadata+gather" in r["chain"]
        cells = []
        for s in LAYER_STEPS:
            if s == "gate+up" and fused:
                cells.append(_num(r["steps_us"].get("gate+up (fused)"), ".1f") + "*")
            elif s == "metadata" and one_launch:
                cells.append(_num(r["steps_us"].get("metadata+gather"), ".1f") + "+")
            elif (s == "activation" and fused) or (s == "gather" and one_launch):
                cells.append("-")
            else:
                cells.append(_num(r["steps_us"].get(s), ".1f"))
        label = f"{r['model']} EP{r['ep']}" if r.get("ep") is not None else r["model"]
        routing = "" if r["routing"] == "balanced" else f" {r['routing']}"
        line = f"{(label + routing)[:23]:<24}{r['tokens']:>5}{_num(r['floor_us'], '.1f'):>8}"
        line += "".join(f"{c:>11}" for c in cells)
        line += f"{_num(r.get('sum_us'), '.1f'):>9}{_num(r.get('whole_us'), '.1f'):>9}"
        line += f"{_num(r.get('gap_us'), '.1f'):>8}{_num(r.get('whole_launches'), 'd'):>9}"
        line += f"{_num(r.get('idle_us'), '.1f'):>7}"
        lines.append(line)
    return "\n".join(lines)


def layer_text(run: dict, ours: str | None = None) -> str:
    """A layer run as the layer command prints it at its end: the comparison
    (:func:`format_layer_summary`) where another implementation ran beside ours, and the step
    profile (:func:`format_step_profile`) where the run timed steps, that last."""
    ours = ours or "pearl-fused"
    parts = []
    summary = layer_summary(run, ours)
    if len(summary["impls"]) > 1 or any(ours in r["us"] for r in summary["rows"]):
        parts.append(format_layer_summary(summary))
    steps = step_profile(run, ours)
    if steps:
        parts.append(format_step_profile(steps, ours))
    return "\n\n".join(parts) or "(nothing timed in this run)"

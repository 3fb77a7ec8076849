"""How well a tuning table's picks carry to shapes and GPUs it did not measure, judged with the
tables' own rounds (no GPU): the studies behind the runtime pick's vote
(:mod:`pearl_moe.kernels.autotune`) and its borrowing of another GPU's table.

* :func:`leave_one_model_out`: every entry's model hidden, the rest vote; the winner's time in the
  hidden entry's rounds over their fastest (the vote's exponents were chosen with it:
  ``experiments/wave_charge``, ``experiments/wave_twin``);
* :func:`transfer_regret`: a borrowed table's answers on the own table's shapes, timed in the own
  rounds (what an H100 loses reading the H200's table);
* :func:`entry_model`: the model an entry was measured on.
"""

from __future__ import annotations

from ..kernels.autotune import heuristic, neighbours, relative_times, table_choice, vote

__all__ = ["entry_model", "leave_one_model_out", "transfer_regret"]


def entry_model(entry: dict) -> str:
    """The model an entry was measured on, from ``measured_at`` ("GLM 5.3 16 tokens (EP8, ...)")."""
    where = entry.get("measured_at") or ""
    head = where.rsplit(" tokens", 1)[0]
    return head.rsplit(" ", 1)[0] if " " in head else head


def leave_one_model_out(table: dict) -> list[dict]:
    """How the vote does on models it has not seen, judged with the table's own measurements.

    For every entry: hide every entry of its model (all its layers: the held-out sets hide whole
    models too), let the rest vote (:func:`~pearl_moe.kernels.autotune.neighbours`,
    :func:`~pearl_moe.kernels.autotune.vote`), and look the winner up among the times the hidden
    entry measured. ``regret`` is that time over the entry's fastest (1.0: the vote found the best;
    None: the vote chose a candidate this entry did not time). The heuristic's regret is given the
    same way, where its pick was timed. Runs on a CPU."""
    rows = []
    for entry in table["entries"]:
        model = entry_model(entry)
        rest = {**table, "entries": [e for e in table["entries"] if entry_model(e) != model]}
        n, k, experts = entry["n"], entry["k"], entry["experts"]
        rpe = entry.get("rows_per_expert", 2.0 ** entry["bucket"])
        rows_ = max(1, round(rpe * experts))
        near = neighbours(rest, n, k, experts, rows_)
        sms = table.get("sm_count", 132)
        scored = vote(near, table["arch"], n, k, rpe, experts, sms) if near else []
        rel = relative_times(entry)
        voted = f"s{scored[0][1]} {scored[0][2].describe()}" if scored else None
        guess = heuristic(table["arch"], n, k, experts, rows_)
        h = f"s{guess.stage} {guess.config.describe()}"
        rows.append(
            {
                "model": model,
                "layer": (n, k, experts),
                "rows_per_expert": rpe,
                "measured_at": entry.get("measured_at"),
                "best": f"s{entry['stage']} {entry.get('label', '')}",
                "voted": voted,
                "neighbours": len(near),
                "regret": rel.get(voted) if voted else None,
                "heuristic": h,
                "heuristic_regret": rel.get(h),
            }
        )
    return rows


def transfer_regret(own: dict, borrowed: dict) -> list[dict]:
    """How a borrowed table's picks would have run on the GPU of ``own``, judged with ``own``'s
    measurements. For every entry of ``own``: the borrowed table's answer for that shape (its entry
    for the same shape and bucket where the kernel runs it, else the vote of its nearest entries, as
    :func:`~pearl_moe.kernels.autotune.pick` gives them) and that candidate's time in the ``own``
    entry's rounds over their fastest (``regret``; None where ``own`` did not time it; the worse of
    the balanced and skewed ratios where the entry timed both, as
    :func:`~pearl_moe.kernels.autotune.relative_times` gives them). In sample: the own entry's
    winner is the fastest of those very rounds, so noise flatters it and a regret near 1 is a tie.
    Both are tables of one architecture. Runs on a CPU."""
    arch = borrowed.get("arch")
    if arch is None or own.get("arch") != arch:
        raise ValueError(f"tables of two architectures: {own.get('arch')} and {arch}")
    sms = borrowed.get("sm_count", 132)
    gpu = borrowed.get("gpu", "?")
    rows = []
    for entry in own["entries"]:
        n, k, experts = entry["n"], entry["k"], entry["experts"]
        rpe = entry.get("rows_per_expert", 2.0 ** entry["bucket"])
        choice = table_choice(arch, n, k, experts, entry["bucket"], gpu, borrowed)
        label, how = None, None
        if choice is not None:
            label, how = f"s{choice.stage} {choice.config.describe()}", "entry"
        else:
            near = neighbours(borrowed, n, k, experts, max(1, round(rpe * experts)))
            scored = vote(near, arch, n, k, rpe, experts, sms) if near else []
            if scored:
                label, how = f"s{scored[0][1]} {scored[0][2].describe()}", f"vote of {len(near)}"
        rel = relative_times(entry)
        rows.append(
            {
                "measured_at": entry.get("measured_at"),
                "own": f"s{entry['stage']} {entry.get('label', '')}",
                "borrowed": label,
                "how": how,
                "regret": rel.get(label) if label else None,
            }
        )
    return rows

"""How long one implementation's GPU state carries over into the next turn (GPU machine).

    python3 experiments/round_order/predecessor_gap.py OUT.json "DeepSeek V4 Pro:64" --target pearl \\
        --before quack-tuned,pearl --gaps-ms 0,10,30,100,300,1000 --repeats 6

The bench times implementations in turns, one right after the other. In the compare run of
2026-11-30 15:16 UTC every implementation was 2-6% slower at decode in the turns right after
quack-tuned (appendix A1). This script measures the carry-over directly: for each
predecessor in ``--before`` and each pause in ``--gaps-ms`` it replays the predecessor's CUDA graph
``--lead`` times, synchronizes, waits the pause, then times ``--target`` (one untimed replay and
``--reps`` timed ones, as a bench turn does). The order of the (predecessor, pause) cells is
shuffled in every repeat. With the target itself as a predecessor the result is the steady state;
the pause after which every predecessor gives the same time is how long a bench must wait between
rounds for the round's first turn not to inherit the last one's state. A negative pause (``-1``)
queues the target right behind the predecessor with no synchronize, as the bench queues the turns
of a round.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("problem", help="'model:tokens'")
    p.add_argument("--target", default="pearl")
    p.add_argument("--before", default="quack-tuned,pearl")
    p.add_argument("--gaps-ms", default="0,10,30,100,300,1000")
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--lead", type=int, default=5, help="predecessor replays before the pause")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)

    import torch

    from pearl_moe.bench import harness
    from pearl_moe.bench.registry import get_impl
    from pearl_moe.results import environment
    from pearl_moe.workloads import make_problem

    model, tokens = args.problem.rsplit(":", 1)
    problem = make_problem(model, int(tokens), 8, "balanced", "gate_up")
    inputs = [harness.make_inputs(problem, "cuda", 100)]
    names = list(dict.fromkeys([args.target, *args.before.split(",")]))
    timers = {n: harness.capture(get_impl(n), problem, inputs, 10, "cuda") for n in names}
    target = timers[args.target]
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    cells = [(b, g) for b in args.before.split(",") for g in gaps]
    times: dict = {f"{b}|{g:g}": [] for b, g in cells}
    rng = random.Random(0)
    for _ in range(args.repeats):
        rng.shuffle(cells)
        for before, gap in cells:
            for _ in range(args.lead):
                timers[before].graph.replay()
            if gap >= 0:  # a negative pause: queued right behind, as the bench's turns are
                torch.cuda.synchronize()
                time.sleep(gap / 1000)
            events = harness.queue_turn(target, args.reps)  # one untimed replay, then reps
            torch.cuda.synchronize()
            us = statistics.median(harness.turn_seconds(target, events)) * 1e6
            times[f"{before}|{gap:g}"].append(us)
    rows = []
    for key, values in times.items():
        before, gap = key.split("|")
        rows.append(
            {
                "before": before,
                "gap_ms": float(gap),
                "median_us": statistics.median(values),
                "min_us": min(values),
                "max_us": max(values),
                "values_us": [round(v, 2) for v in values],
            }
        )
        print(
            f"{args.target} after {before:>14} + {float(gap):6.0f} ms pause: "
            f"median {statistics.median(values):8.1f} us (range {min(values):.1f}-{max(values):.1f})"
        )
    result = {
        "kind": "predecessor_gap",
        "problem": problem.name,
        "target": args.target,
        "config": target.config,
        "method": (
            f"per cell: {args.lead} replays of the predecessor's graph, synchronize, sleep the "
            f"pause, then 1 untimed and {args.reps} timed replays of the target's graph "
            f"({target.launches} calls each); median over the timed replays; {args.repeats} "
            "repeats with the cells shuffled each time"
        ),
        "env": environment("experiments/round_order/predecessor_gap.py " + " ".join(sys.argv[1:])),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Inside the layer run's step graphs: how long each kernel of the plain and the fused gate+up
step runs, and what the graph adds around them (GPU).

    python3 experiments/fused_decode/step_graph_trace.py OUT.json [MODEL,TOKENS ...]
    # default: GLM 5.3,1  DeepSeek V4 Pro,1  Kimi K3,1  GLM 5.3,64

The layer run's CUDA-graph step timings had put the fused gate+up 7-9% above the plain one at 1
token, more than the activation pass it replaces, while the whole fused layer was faster than
the layer with the pass. This script
builds the same step graphs as ``pearl_moe.bench.layer.time_layer_steps`` (the same input sets,
ten calls a graph), replays the plain gate+up, the fused gate+up and the activation graphs
alternately, each replay between two CUDA events, then replays them again, each in a
``torch.profiler`` session of its own (CUPTI kernel records, clocks left free), and writes per
step: the graph's time per call (events, without the profiler), every kernel a replay ran with
its median duration (memsets and copies left out), and the gaps between consecutive kernels
(two replays a profiling session: the warm-up's kernels are in it too). If the fused kernel
itself runs longer inside the graph, the kernels say so; if they match, the difference is in
what the graph adds. Data, gzipped: ``data/step_graph_trace_ieee.json.gz`` (SiLU's IEEE
division: the fused kernel itself ran 1.013-1.091x the plain one at 1 token) and
``data/step_graph_trace_rcp.json.gz`` (the hardware reciprocal: 0.995-1.003x).
"""

from __future__ import annotations

import json
import statistics
import sys

STEPS = ("gate+up", "gate+up (fused)", "activation")
DEFAULT = (("GLM 5.3", 1), ("DeepSeek V4 Pro", 1), ("Kimi K3", 1), ("GLM 5.3", 64))
LAUNCHES, REPLAYS = 10, 20


def trace_problem(model: str, tokens: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pearl_moe.bench.harness import graph_of
    from pearl_moe.bench.layer import LayerProblem, layer_input_sets, step_calls

    problem = LayerProblem(model, tokens)
    inputs = layer_input_sets(problem, "cuda", 200)  # the step timing's seed
    sets = len(inputs)
    per_set = [step_calls(inp) for inp in inputs]
    launches = max(LAUNCHES, sets)
    graphs = {}
    for step in STEPS:
        graph, _ = graph_of(lambda i, s=step: per_set[i % sets][s](), sets, launches, "cuda")
        graphs[step] = graph

    def replay_us(step) -> float:
        graphs[step].replay()  # one untimed replay first, as the bench's turns have
        start, end = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record()
        graphs[step].replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / launches

    # the graphs' time per call without the profiler, alternating as the interleaved rounds do
    plain_time = {step: [] for step in STEPS}
    for _ in range(REPLAYS):
        for step in STEPS:
            plain_time[step].append(replay_us(step))
    # then each replay in a profiling session of its own, so its kernels are its step's
    kernels = {step: [] for step in STEPS}
    for _ in range(REPLAYS // 4):
        for step in STEPS:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                replay_us(step)
            ran = sorted((e for e in prof.events() if e.device_type.name == "CUDA"
                          and not e.name.startswith(("Memset", "Memcpy"))),
                         key=lambda e: e.time_range.start)  # fmt: skip
            kernels[step].append([(e.name, e.time_range.start, e.time_range.elapsed_us())
                                  for e in ran])  # fmt: skip
    steps = {}
    for step in STEPS:
        durations, gaps = {}, []
        for replay in kernels[step]:
            for name, _, us in replay:
                durations.setdefault(name, []).append(us)
            gaps += [b[1] - (a[1] + a[2]) for a, b in zip(replay, replay[1:], strict=False)]
        steps[step] = {
            "graph_us_per_call": statistics.median(plain_time[step]),
            "graph_us_per_call_range": [min(plain_time[step]), max(plain_time[step])],
            "kernels_per_replay": statistics.median(len(r) for r in kernels[step]),
            "kernels": {
                n: {
                    "count": len(v),
                    "median_us": statistics.median(v),
                    "min_us": min(v),
                    "max_us": max(v),
                }
                for n, v in durations.items()
            },  # fmt: skip
            "gap_us_median": statistics.median(gaps) if gaps else None,
        }
    return {"problem": problem.id, "input_sets": sets, "launches_per_graph": launches,
            "replays": REPLAYS, "profiled_replays": REPLAYS // 4, "steps": steps}  # fmt: skip


def main(argv: list[str]) -> int:
    import torch

    out, cases = argv[0], DEFAULT
    if len(argv) > 1:
        cases = tuple((a.rsplit(",", 1)[0], int(a.rsplit(",", 1)[1])) for a in argv[1:])
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    for model, tokens in cases:
        row = trace_problem(model, tokens)
        result["cases"].append(row)
        print(json.dumps(row, indent=1), flush=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

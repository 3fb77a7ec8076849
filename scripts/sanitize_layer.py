"""Run layer implementations on one problem for compute-sanitizer: eagerly (one name), or captured
in CUDA graphs and replayed interleaved as the layer bench does (several names, comma-separated).

    compute-sanitizer --tool memcheck python3 scripts/sanitize_layer.py pearl-fused "GLM 5.3" 1
    compute-sanitizer --tool memcheck python3 scripts/sanitize_layer.py pearl-fused,torch "GLM 5.3" 1
"""

import sys

import torch

from pearl_moe.bench.layer import LayerProblem, layer_impl, make_layer_inputs, time_layers

names, model, tokens = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
problem = LayerProblem(model, tokens)
if len(names) == 1:
    prepared = layer_impl(names[0]).prepare(make_layer_inputs(problem, device="cuda"))
    for _ in range(2):
        prepared.run()
else:
    results = time_layers({n: layer_impl(n) for n in names}, problem, rounds=1, reps=1, launches=2)
    print({n: getattr(r[0], "outputs_message", r[0]) for n, r in results.items()})
torch.cuda.synchronize()
print(",".join(names), model, tokens, "ran")

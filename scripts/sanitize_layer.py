"""Run one layer implementation eagerly on one problem, for compute-sanitizer.

    compute-sanitizer --tool memcheck python3 scripts/sanitize_layer.py pearl-fused "GLM 5.3" 1
"""

import sys

import torch

from pearl_moe.bench.layer import LayerProblem, layer_impl, make_layer_inputs

name, model, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
inputs = make_layer_inputs(LayerProblem(model, tokens), device="cuda")
prepared = layer_impl(name).prepare(inputs)
for _ in range(2):
    prepared.run()
torch.cuda.synchronize()
print(name, model, tokens, "ran")

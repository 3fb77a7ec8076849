"""The layer's gate+up steps (plain and fused) at decode, one call each, for Nsight Compute (GPU).

ncu --profile-from-start off ... python3 experiments/fused_decode/layer_steps_ncu.py "GLM 5.3" 1
"""

from __future__ import annotations

import sys

import torch

from pearl_moe.bench.layer import LayerProblem, make_layer_inputs, step_calls
from pearl_moe.workloads import get_model

model, tokens = sys.argv[1], int(sys.argv[2])
problem = LayerProblem(get_model(model).name, tokens)
calls = step_calls(make_layer_inputs(problem, "cuda", seed=0))
names = ["gate+up", "gate+up (fused)", "gate+up", "gate+up (fused)"]
for name in names:
    calls[name]()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for name in names:
    calls[name]()
    torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("profiled", problem, names)

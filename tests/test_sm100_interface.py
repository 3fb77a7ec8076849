"""The sm_100a stage modules implement the interface ``grouped_gemm`` calls (CPU, no B200 needed).

For every stage, a worker process with ``CUTE_DSL_ARCH=sm_100a`` (the variable must be set before
``cutlass`` is imported, as in :mod:`pearl_moe.course.kernel_report`) compiles through
``pearl_moe.kernels.api.compiled_kernel`` -- the very call ``grouped_gemm`` makes on a B200, i.e.
``stage_module("sm_100a", stage).compile_kernel(config, n, k, experts, sms)`` -- and reports:

* the SASS instruction families (tcgen05 MMA and TMA loads must be there);
* the argument list of the compiled host function (pointers, run-time ``rows``, stream);
* the arguments ``launch`` passes, recorded with a stand-in for the compiled function on CPU
  tensors and then marshalled by the real compiled function's argument converter, which raises on
  a missing or surplus argument. The kernel launch itself needs a B200 and is not exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

N, K, EXPERTS, SMS = 256, 128, 3, 148

#: name -> (stage, GemmConfig kwargs or None for the API's default config)
CASES = {
    "s1-default": (1, None),
    "s2-default": (2, None),
    "s3-default-1cta": (3, None),
    "s3-128x256x64-1cta": (3, {"tile_m": 128, "tile_n": 256, "tile_k": 64, "ring_depth": 4}),
    "s3-256x256x64-2cta": (
        3,
        {"tile_m": 256, "tile_n": 256, "tile_k": 64, "cta_group": 2, "ring_depth": 6},
    ),
    # stages 4-7: options of the stage-3 kernel, with the API's default config for each stage
    "s4-default": (4, None),
    "s5-default": (5, None),
    "s6-default": (6, None),
    "s7-default-2cta": (7, None),
}

WORKER = textwrap.dedent(
    """
    import json, re, sys
    import cuda.bindings.driver as cuda
    import torch
    from pearl_moe.config import GemmConfig
    from pearl_moe.course.kernel_report import count_families, count_opcodes
    from pearl_moe.kernels import api

    cases = json.loads(sys.argv[1])
    n, k, experts, sms = (int(x) for x in sys.argv[2:6])
    rows = 10
    A = torch.zeros(rows, k, dtype=torch.bfloat16)
    W = torch.zeros(experts, n, k, dtype=torch.bfloat16)
    out = torch.zeros(rows, n, dtype=torch.bfloat16)
    ends = torch.tensor([3, 3, rows], dtype=torch.int32)
    # CPU allocations are only 64-byte aligned: cut a 128-byte aligned workspace out of a buffer
    buf = torch.zeros(experts * 16 + 16, dtype=torch.int64)
    skip = (-buf.data_ptr() % 128) // 8
    workspace = buf[skip : skip + experts * 16]

    def describe(arg):
        if hasattr(arg, "dtype") and hasattr(arg, "memspace"):
            return f"ptr {arg.dtype} align={arg._assumed_align}"
        return type(arg).__name__

    reports = {}
    for name, (stage, kwargs) in cases.items():
        config = GemmConfig(**kwargs).resolved() if kwargs else api.default_config("sm_100a", stage)
        compiled = api.compiled_kernel("sm_100a", stage, config, n, k, experts, sms)
        sass = compiled.artifacts.SASS or ""
        host = [
            line for line in str(compiled.ir_module).splitlines()
            if "llvm.func @cutlass___call__" in line
        ][0]
        host_args = re.findall(r"%arg\\d+: ([^,{)]+)", host)
        module = api.stage_module("sm_100a", stage)
        calls = []
        if stage > 1:
            module.module.workspace_for = lambda device, stream, e: workspace
        module.launch(
            lambda *args: calls.append(args), A, W, ends, out, [3, 3, rows], cuda.CUstream(0)
        )
        marshalled = [len(compiled.execution_args.generate_execution_args(c, {})[0]) for c in calls]
        reports[name] = {
            "families": count_families(count_opcodes(sass)),
            "host_args": [a.strip() for a in host_args],
            "launch_args": [[describe(a) for a in c] for c in calls],
            "launch_rows": [c[-2] for c in calls],
            "marshalled": marshalled,
            "ptx_cta_group_2": "tcgen05.mma.cta_group::2" in (compiled.artifacts.PTX or ""),
            "direct_store": config.epilogue == "direct_store",
        }
    print("REPORTS=" + json.dumps(reports))
    """
)


@pytest.fixture(scope="module")
def reports():
    env = dict(os.environ)
    env["CUTE_DSL_ARCH"] = "sm_100a"
    env["CUTE_DSL_KEEP"] = "ptx,cubin,sass"
    # compile for real: a kernel loaded from the disk cache carries no PTX/SASS artifacts
    env["PEARL_MOE_KERNEL_CACHE"] = "off"
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="pearl-moe-sm100-api-") as scratch:
        env["CUTE_DSL_DUMP_DIR"] = scratch
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                WORKER,
                json.dumps(CASES),
                str(N),
                str(K),
                str(EXPERTS),
                str(SMS),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            timeout=900,
        )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("REPORTS="):
            return json.loads(line[len("REPORTS=") :])
    raise AssertionError(f"worker exited with {proc.returncode}:\n{proc.stderr[-6000:]}")


@pytest.mark.parametrize("name", list(CASES))
def test_compile_kernel_emits_tcgen05_mma_and_tma(reports, name):
    fam = reports[name]["families"]
    assert fam["UTC*MMA (tcgen05.mma)"] > 0, "no tcgen05 MMA (UTC*MMA) in the SASS"
    assert fam["UTMALDG (TMA load)"] > 0, "no TMA load (UTMALDG) in the SASS"
    if reports[name]["direct_store"]:
        # stages 4-7 store from registers: 256-bit stores, the output assumed 32-byte aligned
        assert fam["UTMASTG (TMA store)"] == 0
        assert fam["STG.E.ENL2.256"] > 0
    else:
        assert fam["UTMASTG (TMA store)"] > 0
    assert fam["HGMMA (wgmma)"] == 0


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_signature_is_pointers_rows_stream(reports, name):
    stage = CASES[name][0]
    host_args = reports[name]["host_args"]
    pointers = 3 if stage == 1 else 5  # A, W, out (+ offsets, workspace for grouped stages)
    assert len(host_args) == pointers + 2, host_args
    assert all(a.startswith("!llvm.ptr<1>") for a in host_args[:pointers]), host_args
    assert host_args[pointers] == "i32", "rows must stay a run-time Int32"


@pytest.mark.parametrize("name", list(CASES))
def test_launch_arguments_match_the_compiled_function(reports, name):
    stage = CASES[name][0]
    rep = reports[name]
    bf16 = "ptr BFloat16 align=16"
    if stage == 1:
        # the per-expert loop: experts 0 (3 rows) and 2 (7 rows); expert 1 is empty
        assert rep["launch_rows"] == [3, 7]
        expected = [bf16, bf16, bf16, "int", "CUstream"]
    else:
        assert rep["launch_rows"] == [10]
        expected = [
            bf16,
            bf16,
            "ptr Int32 align=4",
            bf16,
            "ptr Int64 align=128",
            "int",
            "CUstream",
        ]
    assert all(args == expected for args in rep["launch_args"]), rep["launch_args"]
    # the compiled function's own argument converter accepted every call (it raises otherwise)
    assert rep["marshalled"] == [len(expected)] * len(rep["launch_args"])


def test_two_cta_config_compiles_cta_group_2(reports):
    assert reports["s3-256x256x64-2cta"]["ptx_cta_group_2"]
    assert reports["s7-default-2cta"]["ptx_cta_group_2"]
    assert not reports["s3-128x256x64-1cta"]["ptx_cta_group_2"]

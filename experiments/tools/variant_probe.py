"""Time course-stage variants against each other on this GPU, compiled in parallel first.

    python3 experiments/tools/variant_probe.py --out $OUT/walk.json \\
        --impls pearl-s6,pearl-s6:walk=serial --tokens 64,4096

Every ``pearl-sN[:field=value+...]`` implementation (the names of ``python -m pearl_moe bench``) is
compiled for every problem in ``--jobs`` worker processes into the disk cache (compiling needs no
GPU), then ``python -m pearl_moe bench`` times them all in interleaved rounds and writes its run
(``--kind``, default ``probe``) to ``--out``. Other implementations (baselines) may be listed too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def compile_requests(impls, problems, arch: str, sms: int) -> list[tuple]:
    """``(arch, stage, config, n, k, experts, sms)`` of every pearl stage variant on every problem."""
    from pearl_moe.bench.baselines import parse_variant, variant_config

    requests = []
    for name in impls:
        try:
            stage, overrides = parse_variant(name)
        except KeyError:  # a baseline: nothing to compile
            continue
        config = variant_config(arch, stage, overrides)
        for p in problems:
            requests.append((arch, stage, config, p.n, p.k, p.experts, sms))
    return list(dict.fromkeys(requests))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impls", required=True, help="comma list of bench implementations")
    p.add_argument("--models", default="all")
    p.add_argument("--tokens", default="64,4096")
    p.add_argument("--rounds", default=None, help="default: the bench's (whole cycles)")
    p.add_argument("--kind", default="probe")
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=12)
    p.add_argument("--deadline-s", default=None)
    args = p.parse_args(argv)

    import torch
    from tqdm import tqdm

    from pearl_moe.bench import cli, tune
    from pearl_moe.kernels.api import arch_of

    bench_args = ["--models", args.models, "--tokens", args.tokens, "--impls", args.impls]
    bench_args += ["--kind", args.kind, "--out", args.out]
    if args.rounds:
        bench_args += ["--rounds", str(args.rounds)]
    if args.deadline_s:
        bench_args += ["--deadline-s", str(args.deadline_s)]
    device = torch.device("cuda")
    arch = arch_of(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    problems = cli.build_problems(cli.parse_args(bench_args))
    requests = compile_requests(args.impls.split(","), problems, arch, sms)
    info = tune.precompile_with_progress(requests, args.jobs, tqdm)
    print({k: v for k, v in info.items() if k != "failures"}, info.get("failures") or "")
    return cli.main(bench_args)


if __name__ == "__main__":
    raise SystemExit(main())

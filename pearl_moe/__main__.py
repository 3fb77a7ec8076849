"""Command line: ``python -m pearl_moe figures | bench | layer | tune | selftest | inspect |
calibrate``.

Each subcommand lives in its own module, imported only when that subcommand runs, so the CLI starts
quickly and a machine without a GPU can still draw figures and inspect compiled kernels.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "figures": (
        "pearl_moe.course.figures",
        "regenerate every figure in figures/ and the tables of README.md and docs/ (no GPU needed)",
    ),
    "bench": ("pearl_moe.bench.cli", "time implementations on this machine's CUDA GPU"),
    "layer": ("pearl_moe.bench.layer", "check, then time, whole MoE layers on this CUDA GPU"),
    "tune": (
        "pearl_moe.bench.tune",
        "measure kernel configurations on this GPU; write the default's table",
    ),
    "inspect": (
        "pearl_moe.course.kernel_report",
        "compile a kernel stage for sm_100a or sm_90a; show SASS facts",
    ),
    "selftest": (
        "pearl_moe.diagnostics.selftest",
        "first run on a new GPU: GPU tests, sanitizers, tune, ablation, comparison",
    ),
    "calibrate": (
        "pearl_moe.model.calibrate",
        "latency model vs every committed H200 measurement of our kernels (no GPU needed)",
    ),
}


def _usage() -> str:
    lines = ["usage: python -m pearl_moe <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {text}" for name, (_, text) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())

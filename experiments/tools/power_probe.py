"""Clock, power and energy of each implementation under sustained load (GPU machine).

    python3 experiments/tools/power_probe.py OUT.json --impls pearl-s3,pearl-s6 \\
        --problems "GLM 5.3:64,GLM 5.3:4096" --seconds 1.5

The bench replays CUDA graphs back to back. At prefill that holds the H200 at its 700 W power
limit, where the SM clock falls from 1980 MHz to about 1.2-1.5 GHz (``clocks.csv`` of the probe run
of 2026-11-30 17:36 UTC, throttle reason "SW power cap"). Then a kernel's time depends on the
energy it spends, not only on its throughput at a fixed clock. This script measures that directly:
for every (problem, implementation) cell it

1. idles ``--idle-s`` (the clock returns to its maximum), then times one graph replay: the
   *cold* time, before the power limit reacts;
2. replays the graph back to back for ``--seconds``, timing every replay, while ``nvidia-smi``
   samples the SM clock and the board power every 50 ms;
3. reports over the *steady* part (after ``--settle-s``): time per call, mean SM clock, mean power,
   and energy per call (power x time).

The cells run in a shuffled order. Nothing here changes a clock or power setting.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


class Sampler:
    """``nvidia-smi`` in loop mode on a reader thread: (monotonic time, SM MHz, watts) samples."""

    FIELDS = ("clocks.sm", "power.draw.instant", "clocks_event_reasons.active")

    def __init__(self, period_ms: int = 50):
        fields = list(self.FIELDS)
        probe = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0:  # older drivers: the averaged power only
            fields[1] = "power.draw"
        self.power_field = fields[1]
        self.samples: list[tuple[float, float, float, str]] = []
        self._proc = subprocess.Popen(
            [
                "nvidia-smi",
                f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits",
                f"-lms={period_ms}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((time.monotonic(), float(parts[0]), float(parts[1]), parts[2]))
            except (ValueError, IndexError):
                continue

    def window(self, t0: float, t1: float) -> list:
        return [s for s in self.samples if t0 <= s[0] <= t1]

    def stop(self):
        self._proc.terminate()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--impls", required=True)
    p.add_argument("--problems", required=True, help="comma list of 'model:tokens'")
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--settle-s", type=float, default=0.5)
    p.add_argument("--idle-s", type=float, default=0.4)
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--jobs", type=int, default=14, help="parallel compiles of pearl-sN variants")
    args = p.parse_args(argv)

    import torch
    from tqdm import tqdm
    from variant_probe import compile_requests

    from pearl_moe.bench import harness, tune
    from pearl_moe.bench.registry import get_impl
    from pearl_moe.kernels.api import arch_of
    from pearl_moe.results import environment
    from pearl_moe.workloads import make_problem

    specs = [s.rsplit(":", 1) for s in args.problems.split(",")]
    problems = {f"{m}:{t}": make_problem(m, int(t), 8, "balanced", "gate_up") for m, t in specs}
    device = torch.device("cuda")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    requests = compile_requests(args.impls.split(","), problems.values(), arch_of(device), sms)
    info = tune.precompile_with_progress(requests, args.jobs, tqdm)
    print({k: v for k, v in info.items() if k != "failures"}, info.get("failures") or "")

    sampler = Sampler()
    cells = []
    timers = {}
    for spec, problem in problems.items():
        inputs = [harness.make_inputs(problem, "cuda", 100)]
        for name in args.impls.split(","):
            try:
                timers[(spec, name)] = harness.capture(
                    get_impl(name), problem, inputs, args.launches, "cuda"
                )
                cells.append((spec, name, problem.name))
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                print(f"skip {name} on {spec}: {type(exc).__name__}: {exc}")
    random.Random(0).shuffle(cells)
    rows = []
    for spec, name, problem_name in cells:
        timer = timers[(spec, name)]
        torch.cuda.synchronize()
        time.sleep(args.idle_s)
        events = harness.queue_turn(timer, 1, warmup_replays=0)
        torch.cuda.synchronize()
        cold = harness.turn_seconds(timer, events)
        t_start = time.monotonic()
        steady = []  # (monotonic time after the replay finished, seconds per call)
        while time.monotonic() - t_start < args.seconds:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            timer.graph.replay()
            b.record()
            b.synchronize()
            steady.append((time.monotonic(), a.elapsed_time(b) * 1e-3 / timer.launches))
        t_end = time.monotonic()
        t_settled = t_start + args.settle_s
        calls = [s for t, s in steady if t >= t_settled]
        samples = sampler.window(t_settled, t_end)
        row = {
            "problem": problem_name,
            "impl": name,
            "config": timer.config,
            "cold_us": cold[0] * 1e6,
            "steady_us": statistics.median(calls) * 1e6 if calls else None,
            "first_us": steady[0][1] * 1e6 if steady else None,
            "replays": len(steady),
            "samples": len(samples),
            "sm_mhz": statistics.mean(s[1] for s in samples) if samples else None,
            "watts": statistics.mean(s[2] for s in samples) if samples else None,
            "power_capped": (
                sum(1 for s in samples if int(s[3], 16) & 0x4) / len(samples) if samples else None
            ),
        }
        if row["steady_us"] and row["watts"]:
            row["joules_per_call"] = row["watts"] * row["steady_us"] * 1e-6
        rows.append(row)
        print(
            f"{problem_name:<40} {name:<52} cold {row['cold_us']:8.1f} us  steady "
            f"{row['steady_us'] or float('nan'):8.1f} us  {row['sm_mhz'] or 0:6.0f} MHz  "
            f"{row['watts'] or 0:5.0f} W  capped {row['power_capped'] or 0:.0%}",
            flush=True,
        )
    sampler.stop()
    result = {
        "kind": "power_probe",
        "method": (
            f"per cell (shuffled): idle {args.idle_s} s, one timed graph replay (cold), then "
            f"back-to-back replays for {args.seconds} s, each timed with CUDA events; steady = "
            f"after {args.settle_s} s; nvidia-smi samples ({sampler.power_field}, clocks.sm) every "
            f"50 ms over the steady part; {args.launches} calls per graph"
        ),
        "env": environment("experiments/tools/power_probe.py " + " ".join(sys.argv[1:])),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

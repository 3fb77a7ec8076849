"""Round-by-round drift of CUDA-graph timings, next to the GPU's clock, power and temperature.

    python3 experiments/power_cap/round_drift.py OUT.json "DeepSeek V4 Pro:64" "GLM 5.3:64" -- triton pearl ...

For each problem every implementation is captured in a CUDA graph (harness.capture), then timed
in interleaved rounds (in the bench's order, ``harness.round_orders``). After each implementation's
turn the script synchronizes and samples NVML (SM clock, power, temperature, throttle reasons), so
each timing sits next to the state of the GPU it ran in. Written to see whether the slowdown of our
decode kernels over a compare run's rounds (their first round fastest, triton flat) follows the
clock.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # no NVML bindings: timings only
        print(f"no NVML ({exc})", flush=True)
        return lambda: {}

    def sample():
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "throttle": int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),
        }

    return sample


def main(argv: list[str]) -> int:
    import torch

    from pearl_moe.bench import harness
    from pearl_moe.bench.registry import get_impl
    from pearl_moe.workloads import make_problem

    out_path, *rest = argv
    split = rest.index("--")
    specs, names = rest[:split], rest[split + 1 :]
    rounds = 20
    sample = _nvml()
    result = {"rounds": rounds, "problems": []}
    for spec in specs:
        model, tokens = spec.rsplit(":", 1)
        problem = make_problem(model, int(tokens), 8, "balanced", "gate_up")
        inputs = [harness.make_inputs(problem, "cuda", 100)]
        timers = {
            name: harness.capture(get_impl(name), problem, inputs, 10, "cuda") for name in names
        }
        rows = []
        t0 = time.time()
        orders = harness.round_orders(names, rounds)
        for r in range(rounds):
            for name in orders[r]:
                timer = timers[name]
                events = harness.queue_turn(timer, reps=5)
                torch.cuda.synchronize()
                us = statistics.median(harness.turn_seconds(timer, events)) * 1e6
                rows.append(
                    {
                        "round": r,
                        "impl": name,
                        "us": round(us, 2),
                        "t_s": round(time.time() - t0, 3),
                        "wall": time.time(),
                        **sample(),
                    }
                )
        result["problems"].append({"problem": spec, "rows": rows})
        for name in names:
            series = [row["us"] for row in rows if row["impl"] == name]
            clocks = [row.get("sm_mhz") for row in rows if row["impl"] == name]
            print(
                f"{spec:20s} {name:45s} first {series[0]:8.1f} last {series[-1]:8.1f} "
                f"median {statistics.median(series):8.1f}  sm MHz {clocks[0]}..{clocks[-1]}",
                flush=True,
            )
    with open(out_path, "w") as f:
        json.dump(result, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

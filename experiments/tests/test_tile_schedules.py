"""The tile-schedule study (static, dynamic, scattered, lockstep), replayed from its data."""

from analysis import REQUESTS, RESULTS, data, hbm_reads, ncu_export, schedule_ratios

from pearl_moe.bench.records import read_run

PAIRS = RESULTS / "schedule" / "ncu_pairs.json"  # stays in results/: notebook 07 reads it too


def test_dynamic_schedule():
    """Static against dynamic (and scattered) tile schedules."""
    reads = hbm_reads(data("tile_schedules", "ncu_schedule.json"))["rows"]
    dynamic = {(r["model"], r["impl"]): r["ratio"] for r in reads if "dynamic" in r["impl"]}
    static = [r["ratio"] for r in reads if "schedule=" not in r["impl"]]
    odd = ("GLM 5.3", "pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1+schedule=dynamic")
    rest = [v for key, v in dynamic.items() if key != odd]
    assert round(min(rest), 2) == 0.87 and round(max(rest), 2) == 1.39  # "0.87-1.39x"
    assert round(dynamic[odd], 2) == 2.05 and round(max(static), 2) == 4.45
    shed = []  # static / dynamic HBM bytes of 64 x 64 and 128 x 64 tiles: "shed 2.2-4.5x"
    for r in reads:
        if r["impl"] in ("pearl-s3:tile_m=64+tile_n=64", "pearl-s3:tile_m=128+tile_n=64"):
            shed.append(r["ratio"] / dynamic[(r["model"], r["impl"] + "+schedule=dynamic")])
    assert round(min(shed), 1) == 2.2 and round(max(shed), 1) == 4.5

    run = read_run(data("tile_schedules", "schedule.json.gz"))
    ratio = schedule_ratios(run, "dynamic")  # (kernel, model, tokens) -> dynamic / static

    def at(tokens, *bases):
        return [v for (b, _, t), v in ratio.items() if t == tokens and (not bases or b in bases)]

    s5 = at(4096, "pearl-s5")
    assert round(min(s5), 2) == 0.77 and round(max(s5), 2) == 0.91  # "0.77-0.91x"
    narrow = at(4096, "pearl-s3:tile_m=64+tile_n=64", "pearl-s3:tile_m=128+tile_n=64")
    assert 0.925 <= min(narrow) < 0.94 and max(at(4096)) > 1.1  # "at most 7%", "some slower"
    assert all(0.95 <= v <= 1.05 for v in at(64))  # "within 5%"
    assert round(max(at(1024)), 2) == 1.37  # "up to 1.37x slower"
    assert round(ratio[("pearl-s5", "Kimi K3", 1024)], 2) == 0.91  # "it gains (0.91x)"
    wide = at(1024, "pearl-s3:tile_m=128+tile_n=256+ring_depth=4")
    wide += at(4096, "pearl-s3:tile_m=128+tile_n=256+ring_depth=4")
    assert all(0.95 <= v <= 1.055 for v in wide)  # "within about 5%": the default call's tile

    pairs = ncu_export(PAIRS)["runs"]["1"]
    ds = pairs["DeepSeek V4 Pro|1024"]
    got = [
        round(ds[f"pearl-s5{s}"][REQUESTS] / 1e6)
        for s in ("", ":schedule=dynamic", ":schedule=scattered")
    ]
    assert got == [63, 91, 97]
    rise = []  # notebook 04: dynamic or scattered "raises the count 1.4-1.9x"
    for key in ("DeepSeek V4 Pro|1024", "GLM 5.3|1024"):
        by = pairs[key]
        for other in (":schedule=dynamic", ":schedule=scattered"):
            rise.append(by["pearl-s5" + other][REQUESTS] / by["pearl-s5"][REQUESTS])
    assert round(min(rise), 1) == 1.4 and round(max(rise), 1) == 1.9
    prun = read_run(data("tile_schedules", "pairs.json.gz"))
    pmed = {(r["problem"], r["impl"]): r["time"]["median_us"] for r in prun["records"]}
    cases = 0
    for (pid, impl), t in pmed.items():
        if impl.endswith(":schedule=scattered"):
            base = impl.split(":")[0]
            assert t > max(pmed[(pid, base)], pmed[(pid, base + ":schedule=dynamic")]), pid
            cases += 1
    assert cases == 12  # "slowest of the three in all twelve cases"


def test_lockstep_schedule():
    """The lockstep schedule, from the two interleaved runs and the Nsight Compute export."""
    names = ("lockstep.json.gz", "lockstep_2.json.gz")
    runs = [read_run(data("tile_schedules", n)) for n in names]
    lock = [schedule_ratios(run, "lockstep") for run in runs]
    dyn = schedule_ratios(runs[0], "dynamic")

    def span(pick, maps=lock):
        values = [v for m in maps for key, v in m.items() if pick(*key)]
        return round(min(values), 2), round(max(values), 2)

    assert span(lambda b, m, t: b == "pearl-s5" and t == 4096) == (0.68, 0.88)
    assert span(lambda b, m, t: b == "pearl-s5" and t == 4096, [dyn]) == (0.74, 0.91)
    kimi = ("pearl-s4", "pearl-s5")
    assert span(lambda b, m, t: b in kimi and m == "Kimi K3" and t == 1024) == (0.83, 0.86)
    assert span(lambda b, m, t: b == "pearl-s6" and t == 4096) == (0.87, 0.98)
    assert span(lambda b, m, t: b == "pearl-s3" and t >= 1024) == (0.99, 1.04)
    assert span(lambda b, m, t: t == 64) == (0.99, 1.05)
    assert span(lambda b, m, t: b == "pearl-s7" and t >= 1024) == (0.94, 1.04)
    assert span(lambda b, m, t: b == "pearl-s5" and m == "GLM 5.3" and t == 1024) == (1.09, 1.10)
    assert max(v for m in lock for v in m.values()) < 1.105  # "cost up to 10%"

    # Nsight Compute: the static kernels that re-read, and their lockstep twins
    rows = hbm_reads(data("tile_schedules", "ncu_lockstep.json"))["rows"]
    reads = {(r["model"], r["tokens"], r["impl"]): r for r in rows}
    rereaders = [k for k, r in reads.items() if "lockstep" not in k[2] and r["ratio"] > 1.5]
    assert len(rereaders) == 8
    assert {(m, t, i[-1]) for m, t, i in rereaders} == {
        ("DeepSeek V4 Pro", 4096, "5"), ("GLM 5.3", 4096, "5"), ("Kimi K3", 4096, "5"),
        ("Kimi K3", 1024, "5"), ("Kimi K3", 1024, "4"), ("Kimi K3", 4096, "4"),
        ("GLM 5.3", 4096, "6"), ("Kimi K3", 4096, "6"),
    }  # fmt: skip
    before = [reads[k]["ratio"] for k in rereaders]
    after = [reads[(m, t, i + ":schedule=lockstep")]["ratio"] for m, t, i in rereaders]
    assert (round(min(before), 2), round(max(before), 2)) == (1.67, 4.38)
    assert (round(min(after), 2), round(max(after), 2)) == (0.94, 1.33)
    assert round(reads[("Kimi K3", 1024, "pearl-s4:schedule=lockstep")]["ratio"], 2) == 0.98
    export = ncu_export(data("tile_schedules", "ncu_lockstep.json"))["runs"]["1"]
    hit = "lts__t_sector_hit_rate.pct"
    k4096 = export["Kimi K3|4096"]
    assert (
        round(k4096["pearl-s5"][hit]) == 47
        and round(k4096["pearl-s5:schedule=lockstep"][hit]) == 86
    )
    req, one = [], []
    for per in export.values():
        for s in (4, 5, 6, 7):
            static, twin = per[f"pearl-s{s}"], per[f"pearl-s{s}:schedule=lockstep"]
            req.append(twin["lts__t_requests.sum"] / static["lts__t_requests.sum"])
            one.append(twin["gpu__time_duration.sum"] / static["gpu__time_duration.sum"])
    assert (round(min(req), 2), round(max(req), 2)) == (0.82, 1.37)
    assert (round(min(one), 2), round(max(one), 2)) == (0.81, 1.32)
    # sustained (interleaved) time / one cold launch at 4096 tokens, both runs
    load = {"static": [], "lockstep": []}
    for run in runs:
        for r in run["records"]:
            model, _, tokens = r["problem"].split("|")[:3]
            cold = export.get(f"{model}|{tokens}", {}).get(r["impl"])
            if r["status"] == "ok" and cold and tokens == "4096":
                side = "lockstep" if "lockstep" in r["impl"] else "static"
                load[side].append(r["time"]["median_us"] / (cold["gpu__time_duration.sum"] / 1e3))
    assert (round(min(load["static"]), 2), round(max(load["static"]), 2)) == (1.08, 1.50)
    assert (round(min(load["lockstep"]), 2), round(max(load["lockstep"]), 2)) == (1.02, 1.14)

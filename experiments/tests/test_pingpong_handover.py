"""The ping-pong hand-over trial (sm_90a stage 7): hand the mainloop over once the last wgmma is
issued, not completed."""

from analysis import RESULTS, data

from pearl_moe.results import read_run


def test_early_pingpong_hand_over_trial():
    """The trial that handed the mainloop over once the last wgmma
    was issued timed stage 7 at 1.03-1.14x stage 6 at 1024 tokens and 0.84-0.99x at 4096 (5
    interleaved rounds, its kernel code recorded), inside what four earlier runs with the order
    kept span: 1.03-1.20x and 0.81-0.99x."""
    run = read_run(data("pingpong_handover", "pingpong_early_handover.json.gz"))
    assert run["env"]["kernel_sources"] and run["env"]["gpu"] == "NVIDIA H200"
    t = {(r["impl"], r["problem"]): r["time"]["median_us"] for r in run["records"]}
    by_tokens = {}
    for p in run["problems"]:
        ratio = t[("pearl-s7", p["id"])] / t[("pearl-s6", p["id"])]
        by_tokens.setdefault(p["tokens_per_gpu"], []).append(ratio)
    assert sorted(by_tokens) == [1024, 4096] and all(len(v) == 3 for v in by_tokens.values())
    assert round(min(by_tokens[1024]), 2) == 1.03 and round(max(by_tokens[1024]), 2) == 1.14
    assert round(min(by_tokens[4096]), 2) == 0.84 and round(max(by_tokens[4096]), 2) == 0.99
    # four earlier runs with the hand-over after the drain: 1.03-1.20x and 0.81-0.99x
    before = {1024: [], 4096: []}
    for path in (
        RESULTS / "walk.json.gz",
        RESULTS / "ablation.json.gz",
        RESULTS / "ladder.json.gz",
        data("reproducibility", "ladder_2.json.gz"),
    ):
        old = read_run(path)
        times = {(r["impl"], r["problem"]): r["time"]["median_us"] for r in old["records"]
                 if r["status"] == "ok"}  # fmt: skip
        for p in old["problems"]:
            key7, key6 = ("pearl-s7", p["id"]), ("pearl-s6", p["id"])
            if p["tokens_per_gpu"] in before and p["routing"] == "balanced" and key7 in times:
                before[p["tokens_per_gpu"]].append(times[key7] / times[key6])
    assert round(min(before[1024]), 2) == 1.03 and round(max(before[1024]), 2) == 1.20
    assert round(min(before[4096]), 2) == 0.81 and round(max(before[4096]), 2) == 0.99

"""HBM bytes read against the model's count (Nsight Compute, two runs)."""

from analysis import data, hbm_reads

DRAM = data("hbm_rereads", "ncu_dram_bytes.json")


def test_hbm_rereads():
    """HBM bytes read against the model's count, both Nsight Compute runs."""
    reads = hbm_reads(DRAM)
    ratio, time = {}, {}
    for r in reads["rows"]:
        key = (r["impl"], r["model"], r["tokens"])
        ratio.setdefault(key, []).append(r["ratio"])
        time.setdefault(key, []).append(r["seconds"])

    def span(pred):
        values = [r for key, rs in ratio.items() if pred(*key) for r in rs]
        return min(values), max(values)

    kimi_1024 = ("pearl-s5", "pearl-s3:tile_m=64+tile_n=64")
    lo, hi = span(
        lambda i, m, t: t <= 1024 and not (m == "Kimi K3" and t == 1024 and i in kimi_1024)
    )
    assert 0.93 <= lo and hi <= 1.025  # "0.93-1.02x at 256 and 1024 tokens, except ..."
    assert 1.9 <= ratio[("pearl-s5", "Kimi K3", 1024)][0] <= 1.95  # "stage 5 reads 1.9x"
    assert 1.55 <= ratio[("pearl-s3:tile_m=64+tile_n=64", "Kimi K3", 1024)][0] <= 1.65
    fine = ("pearl-s3", "pearl-s7", "tile_n=192", "tile_n=256")
    lo, hi = span(
        lambda i, m, t: t == 4096 and i.endswith(fine) and "tile_m=64+tile_n=192" not in i
    )
    assert 0.935 <= lo and hi <= 1.265  # "0.94-1.26x"
    for tag, (a, b) in {
        "pearl-s3:tile_m=64+tile_n=64": (2.8, 4.7),
        "pearl-s5": (2.7, 4.5),
        "pearl-s3:tile_m=128+tile_n=64": (1.8, 2.9),
        "pearl-s7:tile_m=64+tile_n=192+b_k_tiles=1": (1.15, 3.3),
    }.items():
        lo, hi = span(lambda i, m, t, tag=tag: t == 4096 and i == tag)
        assert a - 0.05 <= lo and hi <= b + 0.05 and hi >= b - 0.05, (tag, lo, hi)
    s6 = {m: ratio[("pearl-s6", m, 4096)] for m in ("GLM 5.3", "Kimi K3", "DeepSeek V4 Pro")}
    serial = {m: ratio[("pearl-s6:walk=serial", m, 4096)] for m in s6}
    assert all(2.2 <= r <= 2.55 for m in ("GLM 5.3", "Kimi K3") for r in s6[m])
    assert (
        all(1.09 <= r <= 1.24 for r in serial["GLM 5.3"]) and 2.05 <= serial["Kimi K3"][0] <= 2.15
    )
    assert all(0.97 <= r <= 1.12 for r in s6["DeepSeek V4 Pro"] + serial["DeepSeek V4 Pro"])

    def gap(model):
        return [
            w / s
            for w, s in zip(
                time[("pearl-s6", model, 4096)],
                time[("pearl-s6:walk=serial", model, 4096)],
                strict=True,
            )
        ]

    assert all(1.21 <= g <= 1.30 for g in gap("GLM 5.3"))  # "1.22-1.30x"
    assert 1.17 <= gap("Kimi K3")[0] <= 1.19
    assert all(1.015 <= g <= 1.03 for g in gap("DeepSeek V4 Pro"))  # "2-3%"


def test_reread_bandwidth():
    """The kernels that re-read from HBM use 1.5-3.1 TB/s of it, below the ceiling."""
    reads = hbm_reads(DRAM)
    rereaders = (
        "pearl-s5",
        "pearl-s6",
        "pearl-s3:tile_m=64+tile_n=64",
        "pearl-s3:tile_m=128+tile_n=64",
    )
    rates = [
        r["dram_bytes"] / r["seconds"] / 1e12
        for r in reads["rows"]
        if r["tokens"] == 4096 and r["impl"] in rereaders
    ]
    assert len(rates) == 20 and 1.5 <= min(rates) and max(rates) <= 3.1

"""The tile order at prefill: the L2 model's HBM bytes under the m-fastest and the grouped order."""

import gzip
import json
import math

from analysis import data


def _script():
    """``experiments/prefill_order/l2_model.py`` as a module."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "prefill_order" / "l2_model.py"
    spec = importlib.util.spec_from_file_location("l2_model", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows():
    rows = json.loads(data("prefill_order", "l2_model.json").read_text())["rows"]
    return {(r["shape"], r["tile"], r["l2_mb"]): r for r in rows}


def test_the_grouped_order_halves_the_reads_only_if_little_of_the_l2_is_effective():
    """Qwen2-57B-A14B's gate+up at 4096 tokens (29 MB of A per expert), 128 x 128 tiles: at 30-35
    MB of effective L2 the m-fastest order reads 3.14 GB from HBM and the grouped order 1.52-1.43
    (unique bytes 0.86); from 40 MB on the m-fastest order reads less (1.17 against 1.42). The
    down projections (about 6 MB of A per expert) read the same either way."""
    rows = _rows()
    qwen2 = {mb: rows[("Qwen2-57B-A14B gate_up", "128x128", mb)] for mb in (30, 35, 40)}
    assert [qwen2[mb]["m fastest"] for mb in (30, 35, 40)] == [3.143, 3.138, 1.172]
    assert [qwen2[mb]["groups of 8 n tiles"] for mb in (30, 35, 40)] == [1.519, 1.427, 1.423]
    assert qwen2[30]["unique_gb"] == 0.864
    down = [r for key, r in rows.items() if key[0] == "GLM-4.5-Air down" and key[1] == "128x128"]
    assert len(down) == 5 and all(r["m fastest"] == r["groups of 8 n tiles"] for r in down)


def test_the_grouped_order_can_read_more_and_the_data_is_the_scripts():
    """Qwen3-235B-A22B's gate+up (17 MB of A per expert): the grouped order reads more at 30 MB
    (1.60 against 1.32 GB). One cell recomputed by the script matches the committed data."""
    rows = _rows()
    qwen3 = rows[("Qwen3-235B-A22B gate_up", "128x128", 30)]
    assert (qwen3["m fastest"], qwen3["groups of 8 n tiles"]) == (1.319, 1.601)
    module = _script()
    n, k, per_expert = module.SHAPES["Qwen2-57B-A14B gate_up"]
    for name, group in module.ORDERS.items():
        order = module.tile_order(per_expert, 128, 128, n, 1, group)
        missed = module.hbm_bytes(order, per_expert, 128, 128, k, 1, 132, 30 * 2**20)
        assert round(missed / 1e9, 3) == rows[("Qwen2-57B-A14B gate_up", "128x128", 30)][name]


def test_the_model_uses_the_packages_order():
    """The script numbers tiles with the kernel's own order (host.tile_in_expert)."""
    module = _script()
    order = module.tile_order([256, 0, 384], 128, 128, 640, 1, 2)
    assert sorted(order) == sorted((e, m, n) for e, rows in enumerate([256, 0, 384])
                                   for m in range(rows // 128) for n in range(5))  # fmt: skip
    assert order[:4] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]


def test_on_the_gpu_the_grouped_order_reads_less_but_gains_little():
    """Nsight Compute (one launch each, clocks free) on Qwen2-57B-A14B's gate+up at 4096 tokens:
    128 x 128 ping-pong reads 2.72 GB in m-fastest order, 1.16 GB grouped (L2 hits 72% to 88%),
    1.76 against 1.56 ms. In interleaved rounds (sustained, at the power cap) 1943 against 1888
    us (0.972x), quack 1804. On Qwen3-235B-A22B 1.19 against 0.97 GB, 1295 against 1282 us."""
    ncu = json.loads(data("prefill_order", "ncu_order_ab.json").read_text())
    qwen2 = ncu["runs"]["1"]["Qwen2-57B-A14B|4096"]
    qwen3 = ncu["runs"]["1"]["Qwen3-235B-A22B|4096"]
    assert [round(qwen2[i][0] / 1e9, 2) for i in range(4)] == [2.72, 1.16, 1.82, 1.38]
    assert [round(qwen2[i][2]) for i in (0, 1)] == [72, 88]
    assert [round(qwen2[i][1] / 1e6, 2) for i in (0, 1)] == [1.76, 1.56]
    assert [round(qwen3[i][0] / 1e9, 2) for i in range(4)] == [1.19, 0.97, 1.10, 1.15]
    bench = json.loads(gzip.decompress(data("prefill_order", "order_ab.json.gz").read_bytes()))
    us = {(r["problem"].split("|")[0], r["impl"]): r["time"]["median_us"] for r in bench["records"]}
    p128 = "pearl-s7:tile_m=128+b_k_tiles=1"
    assert (us[("Qwen2-57B-A14B", p128)], us[("Qwen2-57B-A14B", p128 + "+n_group=8")]) == (
        1943.2, 1888.4)  # fmt: skip
    assert us[("Qwen2-57B-A14B", "quack")] == 1804.3
    assert (us[("Qwen3-235B-A22B", p128)], us[("Qwen3-235B-A22B", p128 + "+n_group=8")]) == (
        1295.0, 1282.2)  # fmt: skip


def test_over_the_tuning_sets_prefill_shapes_the_grouped_order_is_not_a_gain():
    """The tuner with n_group=8 twins of 12 candidates (tune --group-twins 12) on the tuning
    set's 14 prefill shapes: the grouped twins won 2 entries; each entry's best grouped candidate
    took 0.941-1.098x its best m-fastest one, geomean 1.032; twin against twin 1.014."""
    from pearl_moe.kernels.autotune import relative_times

    table = json.loads(
        gzip.decompress(data("prefill_order", "tuning_group_twins.json.gz").read_bytes())
    )
    bests, pairs = [], []
    for entry in table["entries"]:
        rel = relative_times(entry)
        grouped = min(r for label, r in rel.items() if " ng8" in label)
        bests.append(grouped / min(r for label, r in rel.items() if " ng8" not in label))
        pairs += [r / rel[lb.replace(" ng8", "")] for lb, r in rel.items() if " ng8" in lb]
    geomean = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert len(bests) == 14 and sum(b < 1 for b in bests) == 2
    assert (round(min(bests), 3), round(max(bests), 3)) == (0.941, 1.098)
    assert round(geomean(bests), 3) == 1.032 and round(geomean(pairs), 3) == 1.014

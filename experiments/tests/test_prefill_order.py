"""The tile order at prefill: the L2 model's HBM bytes under the m-fastest and the grouped order."""

import json

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

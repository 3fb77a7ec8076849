"""How many HBM bytes does a prefill grouped GEMM read under each tile order? (CPU, no GPU)

A coarse model of the L2: least-recently-used over (operand, 128-row block or weight tile, k block)
units of one persistent wave at a time (every CTA of a wave loads its A and B boxes for k block 0,
then 1, ...; the output tiles are written after the wave). Two orders of an expert's tiles:

* ``m fastest`` (``GemmConfig.n_group=0``, the package's default): CTAs side by side share one
  weight tile, and each wave reads the expert's A rows all over again;
* ``groups of 8 n tiles`` (``n_group=8``, quack's prefill order): n fastest inside a group, every
  other group walking m backwards.

The order itself comes from the package (``pearl_moe.kernels.host.tile_in_expert``). The H200's L2
holds 60 MB in two partitions, so how much of it a wave's data can use is not known: the model runs
at several effective sizes. It writes ``data/l2_model.json``:

    python experiments/prefill_order/l2_model.py
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path

from pearl_moe.kernels.host import tile_in_expert

OUT = Path(__file__).resolve().parent / "data" / "l2_model.json"
#: (n, k, rows of each expert): 4096 tokens per GPU, EP8, top-8, balanced
SHAPES = {
    "Qwen2-57B-A14B gate_up": (5120, 3584, [4096] * 8),
    "Qwen3-235B-A22B gate_up": (3072, 4096, [2048] * 16),
    "GLM-4.5-Air down": (4096, 1408, [2048] * 16),
}
#: (label, tile_m, tile_n, CTAs along M in a cluster, clusters in a wave)
TILES = [("128x128", 128, 128, 1, 132), ("128x192 clusterM2", 128, 192, 2, 66)]
L2_MB = (30, 35, 40, 45, 50)
ORDERS = {"m fastest": 0, "groups of 8 n tiles": 8}


def tile_order(rows_per_expert, tile_m, tile_n, n, cluster_m, n_group):
    """(expert, cluster m tile, n tile) in scheduler order: cluster tiles of
    ``tile_m * cluster_m`` rows, as the sm_90a kernel numbers them."""
    n_tiles = math.ceil(n / tile_n)
    order = []
    for e, rows in enumerate(rows_per_expert):
        m_tiles = math.ceil(rows / (tile_m * cluster_m))
        for t in range(m_tiles * n_tiles):
            order.append((e, *tile_in_expert(t, m_tiles, n_tiles, n_group)))
    return order


def hbm_bytes(order, rows_per_expert, tile_m, tile_n, k, cluster_m, clusters, l2_bytes, tile_k=64):
    """Bytes that miss the model L2 (read from HBM, or written and evicted) over one call."""
    starts = [0]
    for rows in rows_per_expert:
        starts.append(starts[-1] + rows)
    lru: OrderedDict = OrderedDict()
    held = missed = 0

    def touch(key, size):
        nonlocal held, missed
        if key in lru:
            lru.move_to_end(key)
            return
        missed += size
        lru[key] = size
        held += size
        while held > l2_bytes:
            held -= lru.popitem(last=False)[1]

    for w in range(0, len(order), clusters):
        wave = order[w : w + clusters]
        for kb in range(math.ceil(k / tile_k)):
            for e, m_tile, n_tile in wave:
                for r in range(cluster_m):  # each CTA of a cluster loads its own rows of A
                    touch(("A", (starts[e] + (m_tile * cluster_m + r) * tile_m) // tile_m, kb),
                          tile_m * tile_k * 2)  # fmt: skip
                touch(("B", e, n_tile, kb), tile_n * tile_k * 2)  # one read a cluster (multicast)
        for e, m_tile, n_tile in wave:
            for r in range(cluster_m):
                touch(("C", e, m_tile, r, n_tile), tile_m * tile_n * 2)
    return missed


def main() -> None:
    rows_out = []
    for shape, (n, k, rows) in SHAPES.items():
        unique = (sum(rows) * k + len(rows) * n * k + sum(rows) * n) * 2
        for label, tile_m, tile_n, cluster_m, clusters in TILES:
            for mb in L2_MB:
                row = {
                    "shape": shape,
                    "tile": label,
                    "l2_mb": mb,
                    "unique_gb": round(unique / 1e9, 3),
                }
                for name, group in ORDERS.items():
                    order = tile_order(rows, tile_m, tile_n, n, cluster_m, group)
                    missed = hbm_bytes(
                        order, rows, tile_m, tile_n, k, cluster_m, clusters, mb * 2**20
                    )
                    row[name] = round(missed / 1e9, 3)
                print(row, flush=True)
                rows_out.append(row)
    OUT.write_text(json.dumps({"model": __doc__.split("\n")[0], "rows": rows_out}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

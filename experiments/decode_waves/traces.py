"""The per-CTA traces of decode GEMMs, reduced and summarized (CPU).

    python experiments/decode_waves/traces.py reduce OUT/trace_*.json.gz    # -> data/cta_trace_decode.json.gz
    python experiments/decode_waves/traces.py                               # the table

``reduce`` keeps, for every configuration of the raw files ``cta_trace.py`` writes, five of its
launches queued back to back (the 3rd to the 7th) and for each working CTA four numbers: its SM
(``%smid``) and, in nanoseconds from the CTA's entry (its cycle counter at the clock the launch
measured), when its first ring entry landed, when its producer issued its last load, and when
its consumers finished, and its tiles. The table: per configuration the kernel's span (first CTA
in to last CTA out, median over the launches), the estimate :func:`balanced_us` (what a schedule
that hands tiles to whichever CTA is free could reach), and the 10th, 50th and 90th percentiles
of the three times over all working CTAs of those launches: what a decode GEMM spends before its
first bytes arrive, and how far apart its CTAs finish.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "cta_trace_decode.json.gz"
KEEP = slice(2, 7)


def _c31(a: int, b: int) -> int:
    return (b - a) & 0x7FFFFFFF


def reduce(paths) -> dict:
    out = {"configs": {}}
    for path in paths:
        raw = json.load(gzip.open(path))
        out["gpu"] = raw["gpu"]
        for spec, run in raw["runs"].items():
            launches = run["queued"]["launches"][KEEP]
            kept, spans = [], []
            for launch in launches:
                ghz = launch["summary"]["clock_ghz"]
                ctas = [
                    [r[0]] + [round(_c31(r[2], r[i]) / ghz) for i in (5, 4, 7)] + [r[9]]
                    for r in launch["ctas"]
                    if r[9] > 0
                ]
                kept.append(ctas)
                spans.append(round(launch["summary"]["span_us"], 2))
            name = f"{raw['problem']} | {run['config']}"
            out["configs"][name] = {"spec": spec, "span_us": spans, "ctas": kept}
    return out


def balanced_us(ctas) -> float:
    """An estimate, not a measurement: the launch's time had every working CTA kept drawing
    tiles at the rate it showed (its tiles over its time from its first bytes to its end) until
    all were done, as a schedule handing tiles to whichever CTA is free would let it: the median
    first-bytes wait plus all tiles over the summed rates."""
    first = statistics.median(c[1] for c in ctas)
    rate = sum(c[4] / (c[3] - first) for c in ctas)
    return (first + sum(c[4] for c in ctas) / rate) / 1e3


def table(data: dict) -> list[dict]:
    rows = []
    for name, cfg in data["configs"].items():
        cols = list(zip(*[c for launch in cfg["ctas"] for c in launch], strict=True))
        row = {"name": name, "span_us": statistics.median(cfg["span_us"]),
               "working": len(cfg["ctas"][0])}  # fmt: skip
        for label, values in zip(("first_data", "last_load", "end"), cols[1:4], strict=True):
            dec = statistics.quantiles(values, n=10)
            row[label] = (dec[0] / 1e3, dec[4] / 1e3, dec[8] / 1e3)
        row["balanced_us"] = statistics.median(balanced_us(launch) for launch in cfg["ctas"])
        rows.append(row)
    return rows


def main(argv) -> int:
    if argv[:1] == ["reduce"]:
        DATA.parent.mkdir(exist_ok=True)
        with gzip.GzipFile(DATA, "wb", mtime=0) as f:
            f.write(json.dumps(reduce(argv[1:]), separators=(",", ":")).encode())
        print(f"wrote {DATA}")
        return 0
    data = json.load(gzip.open(DATA))
    print(data["gpu"], "- us from each CTA's entry: 10th / 50th / 90th percentile")
    print(f"{'problem | configuration':78s} {'CTAs':>4s} {'span':>6s} {'balanced':>8s}  "
          f"{'first data':>16s}  {'last load':>16s}  {'end':>16s}")  # fmt: skip
    for r in table(data):
        cells = "  ".join("{:4.1f} /{:5.1f} /{:5.1f}".format(*r[k]) for k in
                          ("first_data", "last_load", "end"))  # fmt: skip
        print(f"{r['name']:78s} {r['working']:4d} {r['span_us']:6.1f} {r['balanced_us']:8.1f}  "
              f"{cells}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

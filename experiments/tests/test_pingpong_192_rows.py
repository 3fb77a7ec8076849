"""The 192 x 128 ping-pong tile: the A/B on an H100 that put it in the package and among the
tuner's candidates where 192-row tiles pad an expert's rows less than 128-row ones."""

from analysis import ab_ratios

T192 = "pearl-s7:tile_m=192+tile_n=128+b_k_tiles=1"
KIMI, V4, GLM = (
    f"{m}|gate_up|1024|EP8|balanced" for m in ("Kimi K3", "DeepSeek V4 Pro", "GLM 5.3")
)


def _ratios(reference: str) -> dict:
    return ab_ratios("pingpong_192_rows", "pingpong_192_ab.json.gz", reference)


def test_the_192_row_tile_wins_only_where_it_pads_less():
    """The course's gate+up layers at 1024 tokens, six interleaved rounds: on Kimi K3 (146 rows
    per expert) the tile took 1.003x the default call's time, 0.972x paired along N (0.996x
    quack-tuned's); on DeepSeek V4 Pro (128 rows) 1.06-1.10x and on GLM 5.3 (256) 1.39-1.41x."""
    vs_default = _ratios("pearl")
    alone, pair = vs_default[T192], vs_default[T192 + "+cluster_n=2"]
    assert (round(alone[KIMI], 3), round(pair[KIMI], 3)) == (1.003, 0.972)
    assert round(_ratios("quack-tuned")[T192 + "+cluster_n=2"][KIMI], 3) == 0.996
    assert (round(pair[V4], 2), round(alone[V4], 2)) == (1.06, 1.10)
    assert (round(pair[GLM], 2), round(alone[GLM], 2)) == (1.39, 1.41)

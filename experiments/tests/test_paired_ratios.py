"""``tools/paired_ratios.py``, which reads the trial builds' A/B runs, agrees with the
uniform-index study's own reading."""

from analysis import EXPERIMENTS, data

from pearl_moe.bench.compare import geomean


def test_paired_ratios_reads_an_ab_run_as_the_study_did():
    """``tools/paired_ratios.py`` on the uniform-index A/B's run after the change: ours / quack
    0.976 over the 20 held-out 4096-token layers, as ``down_profile/uniform_ab.py`` reads it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "paired", EXPERIMENTS / "tools" / "paired_ratios.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.ratios(str(data("down_profile", "uniform_ab_heldout_after.json.gz")))
    assert set(table) == {"pearl"} and len(table["pearl"]) == 20
    assert round(geomean(list(table["pearl"].values())), 3) == 0.976

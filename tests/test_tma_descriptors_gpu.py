"""Per-expert TMA store descriptors written on the device: patched bytes and clipped stores, with
the C store of every sm_100a TMA-store configuration (its box, swizzle and acquire sequence).

Runs on any GPU the kernels support (sm_90a or sm_100a): the descriptor format and the TMA store
are the same on both, so a Hopper GPU checks the path the sm_100a grouped stages take.
"""

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.diagnostics.descriptor_check import STORE_CONFIGS  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def reports():
    from pearl_moe.diagnostics.descriptor_check import check_all, format_report

    rep = check_all()
    print(format_report(rep))
    return {r["config"]: r for r in rep["reports"]}


@pytest.mark.parametrize("name", list(STORE_CONFIGS))
def test_stores_through_patched_descriptors_stay_inside_each_expert(reports, name):
    report = reports[name]
    assert "error" not in report, report.get("error")
    failed = [s for s in report["stores"] if not s["ok"]]
    assert not failed, failed
    # every expert alone, then all at once
    assert len(report["stores"]) == len(report["rows"]) + 1


@pytest.mark.parametrize("name", list(STORE_CONFIGS))
def test_patched_descriptor_bytes_match_the_host_encoders(reports, name):
    """The patch sets exactly what the host would encode for the expert's view, except in fields
    ``tensormap.replace`` leaves alone: those keep the host's value for the whole output."""
    report = reports[name]
    assert "error" not in report, report.get("error")
    rows_checked = [b["rows"] for b in report["bytes"]]
    assert rows_checked == [r for r in report["rows"] if r], "every non-empty expert compared"
    for b in report["bytes"]:
        assert b["differences_inherited_from_template"], (b["rows"], b["patched_vs_host"])


@pytest.mark.parametrize("name", list(STORE_CONFIGS))
def test_descriptors_written_in_one_launch_serve_the_next(reports, name):
    """The grouped kernels write descriptors in a pre-kernel and store in the GEMM launch; here
    the workspace also held other offsets' descriptors before (a stale cached copy would show)."""
    two = reports[name]["two_launches"]
    assert two["first_ok"] and two["ok"], two


@pytest.mark.parametrize("name", ["1cta-128x128", "2cta-128x256-folded"])
def test_probe_sees_wrong_descriptors(name):
    """The check can fail: a probe whose descriptor keeps the whole output (no patch) spills."""
    from pearl_moe.diagnostics import descriptor_check

    rep = descriptor_check.check_descriptors(rows=(1, 15, 16), config=name, unpatched=True)
    assert not rep["stores_ok"]


def test_selftest_cases_on_this_gpu():
    """The cases compute-sanitizer wraps in ``selftest``, checked without it: on a B200 these run
    the sm_100a stages through the descriptors patched on the device (stages 2 and 3, 1- and
    2-CTA), on Hopper the sm_90a twins."""
    from pearl_moe.diagnostics import selftest
    from pearl_moe.kernels.targets import gpu_target

    assert selftest.run_cases(gpu_target("cuda")[0])

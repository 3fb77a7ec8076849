"""Per-expert TMA store descriptors written on the device: patched bytes and clipped stores.

Runs on any GPU the kernels support (sm_90a or sm_100a): the descriptor format and the TMA store
are the same on both, so the H200 checks the path the sm_100a grouped stages take.
"""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def report():
    from pearl_moe.diagnostics.descriptor_check import check_descriptors, format_report

    rep = check_descriptors()
    print(format_report(rep))
    return rep


def test_stores_through_patched_descriptors_stay_inside_each_expert(report):
    failed = [s for s in report["stores"] if not s["ok"]]
    assert not failed, failed
    # every expert alone, then all at once
    assert len(report["stores"]) == len(report["rows"]) + 1


def test_patched_descriptor_bytes_match_the_host_encoders(report):
    """The patch sets exactly what the host would encode for the expert's view, except in fields
    ``tensormap.replace`` leaves alone: those keep the host's value for the whole output."""
    rows_checked = [b["rows"] for b in report["bytes"]]
    assert rows_checked == [r for r in report["rows"] if r], "every non-empty expert compared"
    for b in report["bytes"]:
        assert b["differences_inherited_from_template"], (b["rows"], b["patched_vs_host"])


def test_descriptors_written_in_one_launch_serve_the_next(report):
    """The grouped kernels write descriptors in a pre-kernel and store in the GEMM launch; here
    the workspace also held other offsets' descriptors before (a stale cached copy would show)."""
    two = report["two_launches"]
    assert two["first_ok"] and two["ok"], two


def test_probe_sees_wrong_descriptors():
    """The check can fail: a probe whose descriptor keeps the whole output (no patch) spills."""
    from pearl_moe.diagnostics import descriptor_check

    rep = descriptor_check.check_descriptors(rows=(1, 15, 16), unpatched=True)
    assert not rep["stores_ok"]


def test_selftest_cases_on_this_gpu():
    """The cases compute-sanitizer wraps in ``selftest``, checked without it: on a B200 these run
    the sm_100a stages through the descriptors patched on the device (stages 2 and 3, 1- and
    2-CTA), on an H200 the sm_90a twins."""
    from pearl_moe.diagnostics import selftest
    from pearl_moe.kernels.targets import gpu_target

    assert selftest.run_cases(gpu_target("cuda")[0])

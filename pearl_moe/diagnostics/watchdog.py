"""A pytest plugin for the selftest's test phase: a per-test timeout that names the hung test.

A GPU kernel that deadlocks (a barrier that never completes) hangs the process inside a CUDA call,
and one that faults (an illegal instruction or address) leaves the CUDA context unusable for every
later test of the process. Neither can be recovered inside the process, so this plugin only
*records*, and the selftest's phase runner (:func:`pearl_moe.diagnostics.selftest.run_phase`)
restarts pytest without the tests already done:

* before each test it writes ``start <nodeid>`` to the progress file, after it ``end <nodeid>
  <outcome> <seconds>`` (flushed at once), so a process that dies mid-test leaves a ``start``
  without an ``end``: that test hung or crashed;
* it arms :func:`faulthandler.dump_traceback_later` with the test timeout: a test that runs
  longer gets every thread's Python traceback written to ``<progress>.tracebacks`` and the
  process ends (no GIL needed: a thread stuck in a CUDA call cannot stop it);
* a test that fails with a CUDA error that poisons the context ends the process after its report
  (``poisoned <nodeid>``), so the tests after it run in a fresh process instead of failing too;
* tests named in the skip file (one node id a line) are deselected: those a restart must not run
  again.

Loaded with ``-p pearl_moe.diagnostics.watchdog``; configured by the environment variables
:data:`ENV_TIMEOUT` (seconds, default 600), :data:`ENV_PROGRESS` and :data:`ENV_SKIP` (paths).
Without :data:`ENV_PROGRESS` it does nothing.
"""

from __future__ import annotations

import faulthandler
import os
import time

ENV_TIMEOUT = "PEARL_MOE_TEST_TIMEOUT"
ENV_PROGRESS = "PEARL_MOE_TEST_PROGRESS"
ENV_SKIP = "PEARL_MOE_TEST_SKIP"
#: Exit status of a process the plugin ended after a context-poisoning CUDA error.
POISONED_EXIT = 86
#: Error text after which the CUDA context of the process cannot run another kernel.
STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "an illegal",
    "CUDA_ERROR_ILLEGAL",
    "CUDA_ERROR_LAUNCH_FAILED",
    "cudaErrorIllegal",
    "cudaErrorLaunchFailure",
    "device-side assert",
    "hardware stack error",
    "CUDA_ERROR_ASSERT",
)

_state: dict = {}


def _write(line: str) -> None:
    path = _state.get("progress")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def pytest_configure(config):
    path = os.environ.get(ENV_PROGRESS)
    if not path:
        return
    _state["progress"] = path
    _state["timeout"] = float(os.environ.get(ENV_TIMEOUT, "600"))
    _state["tracebacks"] = open(path + ".tracebacks", "a")  # noqa: SIM115 (for faulthandler)
    _write(f"session {os.getpid()} timeout {_state['timeout']:.0f}")


def pytest_unconfigure(config):
    tracebacks = _state.pop("tracebacks", None)
    if tracebacks is not None:
        faulthandler.cancel_dump_traceback_later()
        tracebacks.close()
    _state.pop("progress", None)


def pytest_collection_modifyitems(session, config, items):
    skip_path = os.environ.get(ENV_SKIP)
    if not _state.get("progress") or not skip_path or not os.path.exists(skip_path):
        return
    with open(skip_path) as f:
        skip = {line.strip() for line in f if line.strip()}
    kept = [item for item in items if item.nodeid not in skip]
    dropped = [item for item in items if item.nodeid in skip]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_logstart(nodeid, location):
    if not _state.get("progress"):
        return
    _write(f"start\t{nodeid}")
    _state.update(nodeid=nodeid, t0=time.monotonic(), outcome="passed", poisoned=False)
    tracebacks = _state["tracebacks"]
    tracebacks.write(f"--- {nodeid}: traceback if it runs past {_state['timeout']:.0f} s\n")
    tracebacks.flush()
    faulthandler.dump_traceback_later(_state["timeout"], exit=True, file=tracebacks)


def pytest_runtest_logreport(report):
    if not _state.get("progress") or report.nodeid != _state.get("nodeid"):
        return
    if report.failed:
        _state["outcome"] = "failed" if report.when == "call" else "error"
        text = str(report.longrepr)
        if any(err in text for err in STICKY_CUDA_ERRORS):
            _state["poisoned"] = True
    elif report.skipped and _state["outcome"] == "passed":
        _state["outcome"] = "skipped"


def pytest_runtest_logfinish(nodeid, location):
    if not _state.get("progress") or nodeid != _state.get("nodeid"):
        return
    faulthandler.cancel_dump_traceback_later()
    seconds = time.monotonic() - _state["t0"]
    _write(f"end\t{nodeid}\t{_state['outcome']}\t{seconds:.1f}")
    if _state["poisoned"]:
        _write(f"poisoned\t{nodeid}")
        os._exit(POISONED_EXIT)  # the context is lost: the runner goes on in a fresh process


def read_progress(path) -> dict:
    """What a progress file says: ``outcomes`` (node id -> outcome, seconds) of the tests that
    ended, ``hung`` (tests that started and never ended: the process was ended in them, by the
    timeout or a crash), ``poisoned`` (tests after whose failure the process ended)."""
    outcomes: dict = {}
    started: list = []
    poisoned: list = []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split("\t")
        if parts[0] == "start":
            started.append(parts[1])
        elif parts[0] == "end" and len(parts) >= 4:
            outcomes[parts[1]] = (parts[2], float(parts[3]))
        elif parts[0] == "poisoned":
            poisoned.append(parts[1])
    hung = [nodeid for nodeid in dict.fromkeys(started) if nodeid not in outcomes]
    return {"outcomes": outcomes, "hung": hung, "poisoned": poisoned}

"""The course as a user meets it: JupyterLab in a real (headless) Chromium, Run All, move a widget.

nbclient (``test_notebooks.py``) proves the kernel side. This test proves the front end: JupyterLab
renders every notebook's outputs, no cell ends in a traceback or stays unexecuted after Run All,
and a widget's change reaches the kernel and comes back as a new picture.

The browser provisions itself, so ``pip install -e ".[course,dev]"`` then ``pytest`` stays the whole set-up:

* the driver is PyPI's ``playwright`` (in the ``dev`` extra); ``playwright install`` is not used (it
  downloads from a CDN);
* the browser is the headless Chromium that the npm package ``@sparticuz/chromium`` ships inside its
  tarball, installed with the machine's ``npm`` into ``~/.cache/pearl-moe/browser/`` (or
  ``$PEARL_MOE_CACHE/browser``) and unpacked there on first use; ``$PEARL_MOE_CHROMIUM`` names
  another Chromium binary instead.

Without Node.js/npm (or when the install fails) the test skips and says why; with
``PEARL_MOE_REQUIRE_BROWSER=1`` (set by ``.ci/run``) that skip is a failure, so CI cannot pass
without running it. JupyterLab gets its own settings, workspace and runtime folders and a copy of
the notebooks in a temporary folder, so nothing it saves reaches the repository; screenshots of
every notebook go to pytest's temporary folder (printed on failure).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
CHROMIUM_PACKAGE = "@sparticuz/chromium@143.0.4"  # Chromium 143; 153+ needs Node >= 22.17
REQUIRE_ENV = "PEARL_MOE_REQUIRE_BROWSER"
#: Notebooks whose widget must be found and moved (00b's occupancy explorer, the first the course
#: shows); so must any notebook whose code makes a widget (:func:`_uses_a_widget`).
WIDGET_NOTEBOOKS = ("00b_why_grouped_gemm",)
NOTEBOOK_TIMEOUT_S = 600
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _unavailable(reason: str):
    """Skip, or fail where the browser test is required (CI)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but the browser test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


# ---------------------------------------------------------------------------- the browser
def browser_cache() -> Path:
    root = os.environ.get("PEARL_MOE_CACHE") or Path.home() / ".cache" / "pearl-moe"
    return Path(root) / "browser"


def provision_chromium(cache: Path) -> str:
    """Path of a headless Chromium: ``$PEARL_MOE_CHROMIUM``, or the one npm's
    ``@sparticuz/chromium`` ships, installed into ``cache`` and unpacked there (once)."""
    given = os.environ.get("PEARL_MOE_CHROMIUM")
    if given:
        if not os.access(given, os.X_OK):
            _unavailable(f"PEARL_MOE_CHROMIUM={given} is not an executable")
        return given
    unpacked = cache / "chromium"
    exe = unpacked / "chromium"
    if exe.exists() and os.access(exe, os.X_OK):
        return str(exe)
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _unavailable(
            f"the browser test installs its Chromium with npm ({CHROMIUM_PACKAGE}); "
            "Node.js and npm are not on PATH"
        )
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "node_modules" / "@sparticuz" / "chromium").exists():
        proc = subprocess.run(
            [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", "--loglevel=error",
             CHROMIUM_PACKAGE],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if proc.returncode:
            _unavailable(f"npm install {CHROMIUM_PACKAGE} failed: {proc.stderr.strip()[-800:]}")
    unpacked.mkdir(exist_ok=True)
    script = "import c from '@sparticuz/chromium'; console.log(await c.executablePath())"
    proc = subprocess.run(
        [node, "--input-type=module", "-e", script],
        cwd=cache, env={**os.environ, "TMPDIR": str(unpacked)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode or not os.access(path, os.X_OK):
        _unavailable(f"unpacking {CHROMIUM_PACKAGE} failed: {proc.stderr.strip()[-800:]}")
    return path


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable(
            "playwright is not installed (it comes with the dev extra: pip install -e '.[dev]')"
        )
    executable = provision_chromium(browser_cache())
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


# ---------------------------------------------------------------------------- JupyterLab
SETTINGS = {
    # every cell stays in the DOM, so every prompt and output can be read
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, url: str, token: str, root: Path, log: Path):
        self.url, self.token, self.root, self.log = url, token, root, log

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for session in self.api("/api/sessions"):
            self.api(f"/api/sessions/{session['id']}", "DELETE")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, browser):
    work = tmp_path_factory.mktemp("jupyterlab")
    root = work / "notebooks"  # a copy: whatever JupyterLab saves never reaches the repository
    shutil.copytree(REPO / "notebooks", root)
    settings = work / "settings"
    for name, values in SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    env = dict(os.environ)
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        JUPYTER_CONFIG_DIR=str(work / "config"),
        IPYTHONDIR=str(work / "ipython"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = work / "jupyterlab.log"
    with open(log, "w") as out:
        server = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    lab = Lab(f"http://127.0.0.1:{port}", token, root, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                lab.api("/api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield lab
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory):
    return tmp_path_factory.mktemp("browser-screenshots")


# ---------------------------------------------------------------------------- one notebook
def _prompts(page) -> list[str]:
    return [t.strip() for t in page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()]


def _kernel_idle(page) -> bool:
    return any(
        re.search(r"\|\s*Idle\s*$", t)
        for t in page.locator(".jp-StatusBar-TextItem").all_inner_texts()
    )


def _wait(predicate, timeout: float, what: str, page, shot: Path):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            page.screenshot(path=str(shot))
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; screenshot {shot}")
        time.sleep(0.5)


def _run_all(page, shot: Path) -> None:
    """Run > Run All Cells (matched exactly: 'Restart Kernel and Run All...' also contains it),
    then wait until no cell is queued or running and the kernel is idle."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    _wait(lambda: any("*" in p for p in _prompts(page)), 60, "Run All to start", page, shot)
    quiet = 0
    deadline = time.monotonic() + NOTEBOOK_TIMEOUT_S
    while quiet < 3:  # three polls in a row with nothing running and the kernel idle
        time.sleep(0.5)
        busy = any("*" in p for p in _prompts(page)) or not _kernel_idle(page)
        quiet = 0 if busy else quiet + 1
        if time.monotonic() > deadline:
            page.screenshot(path=str(shot))
            pytest.fail(f"Run All did not finish in {NOTEBOOK_TIMEOUT_S} s; screenshot {shot}")


def _widget_image(box) -> str | None:
    img = box.locator(".widget-output img")
    if not img.count():
        return None
    try:  # the picture may be replaced between the count and the read
        return img.first.get_attribute("src", timeout=2000)
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: no picture right now
        return None


def _move_a_widget(page, shot: Path) -> str:
    """Change the first dropdown (or slider) of a widget that shows a picture, wait for the
    picture to change, and screenshot the widget. Returns what was moved ("" if no widget)."""
    # Pin the box by position: a locator filtered on "has a picture" would lose the box as soon
    # as a refused combination replaces its picture with the reason.
    boxes = page.locator(".jp-OutputArea-output .widget-vbox")
    first = next(
        (i for i in range(boxes.count()) if boxes.nth(i).locator(".widget-output img").count()),
        None,
    )
    if first is None:
        return ""
    box = boxes.nth(first)
    moved = _move(box, page, shot)
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(shot.with_name(f"{shot.stem}-widget.png")))
    return moved


def _refused(box) -> bool:
    """The widget shows why a combination cannot run (``_Explorer.redraw``) instead of a picture."""
    out = box.locator(".widget-output")
    return bool(out.count()) and "not possible:" in out.first.inner_text(timeout=2000)


def _move(box, page, shot: Path) -> str:
    before = _widget_image(box)

    def changed(timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = _widget_image(box)
            if now and now != before:
                return True
            if not now and _refused(box):
                return False  # refused, with the reason: no need to wait out the timeout
            time.sleep(0.5)
        return False

    # Some combinations are refused (the widget then shows why instead of a picture): try a few
    # options of each dropdown until one redraws the picture, putting back the value of each
    # refused try first, so that the next dropdown starts from the picture (a stage-7 2-CTA tile
    # refuses every tile shape and both Hopper choices; its tile_k redraws).
    selects = box.locator(".widget-dropdown select")
    for i in range(selects.count()):
        select = selects.nth(i)
        current = select.input_value()
        values = [o.get_attribute("value") for o in select.locator("option").all()]
        for value in [v for v in values if v != current][:3]:
            select.select_option(value)
            if changed():
                return f"dropdown {i}: {current!r} -> {value!r}"
            select.select_option(current)
            _wait(
                lambda: _widget_image(box) is not None, 30, "the picture to come back", page, shot
            )
            before = _widget_image(box)
    handles = box.locator(".widget-slider .noUi-handle")
    if handles.count():
        handles.first.focus()
        handles.first.press("ArrowRight")
        if changed(60):
            return "slider one step right"
    page.screenshot(path=str(shot))
    pytest.fail(f"moving the widget's controls never changed its picture; screenshot {shot}")


def _uses_a_widget(path: Path) -> bool:
    """The notebook's code shows one of pearl_moe.course.widgets' explorers (or another
    ipywidgets box); a mention in markdown does not count."""
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "Explorer(" in code or "ipywidgets" in code


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab(lab, browser, screenshots, path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    shot = screenshots / f"{path.stem}.png"
    try:
        page.goto(f"{lab.url}/lab/tree/{path.name}?reset&token={lab.token}")
        # The toolbar says "idle" before a kernel exists; Run All then would ask for a kernel.
        _wait(lambda: _kernel_idle(page), 120, "the kernel to be idle", page, shot)
        cells = len(_prompts(page))
        assert cells, f"{path.name}: JupyterLab shows no code cell"
        _run_all(page, shot)
        prompts = _prompts(page)
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        tracebacks = [
            t[-1500:] for t in outputs if "Traceback" in t or "Error displaying widget" in t
        ]
        unexecuted = [i for i, p in enumerate(prompts) if not re.fullmatch(r"\[\d+\]:", p)]
        page.screenshot(path=str(shot), full_page=True)
        assert not tracebacks, f"{path.name}: traceback in the page (screenshot {shot}):\n" + (
            "\n---\n".join(tracebacks)
        )
        assert not unexecuted, (
            f"{path.name}: code cells {unexecuted} (of {len(prompts)}) not executed after Run All; "
            f"screenshot {shot}"
        )
        moved = _move_a_widget(page, shot)
        if path.stem in WIDGET_NOTEBOOKS or _uses_a_widget(path):
            assert moved, f"{path.name}: no widget with a picture found; screenshot {shot}"
    finally:
        context.close()
        lab.shutdown_kernels()


def test_without_node_the_test_skips_and_ci_fails(tmp_path, monkeypatch):
    """No Node.js: a skip that says why; under PEARL_MOE_REQUIRE_BROWSER=1 (CI) a failure."""
    monkeypatch.delenv("PEARL_MOE_CHROMIUM", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="Node.js and npm are not on PATH"):
        provision_chromium(tmp_path)
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="cannot run"):
        provision_chromium(tmp_path)

"""One real browser: `streamlit run streamlit_app.py` headless, driven by Debian's Chromium through Playwright.

Runs a CPU profile from the Profile page, waits for the Altair chart to render, downloads its PNG, and saves
a screenshot of every page under test-output/screenshots/. Skips when /usr/bin/chromium or the playwright
package is missing (CI installs Chromium with apt; never `playwright install`, which downloads browsers).
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest_app import H200, ROOT, import_trace

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = ROOT / "test-output" / "screenshots"
PAGES = ["", "profile", "overhead", "variance", "compile_vs_eager", "dispatch", "runs", "trace_lab"]
RUNS: dict = {}  # the server's run store (set by the server fixture)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api", reason="no playwright package (pip install playwright)")
    runs = tmp_path_factory.mktemp("browser") / "runs"
    RUNS["dir"] = runs
    for name in ("64_bf16_cold_eager", "4096_bf16_warm_eager", "4096_bf16_warm_compile"):
        import_trace(runs, H200 / f"{name}.json", name)  # GPU traces, so GPU panels have something to show
    with _serve(runs) as url:
        yield url


@contextlib.contextmanager
def _serve(runs: Path):
    """`streamlit run streamlit_app.py` on a free port over the run store ``runs``; yields its URL."""
    port = _free_port()
    log = open(runs.parent / "streamlit.log", "w")
    env = dict(os.environ, PROFILING_RUNS_DIR=str(runs), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port", str(port),
         "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("streamlit did not start:\n" + (runs.parent / "streamlit.log").read_text()[-3000:])
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

@pytest.fixture(scope="module")
def browser_page(server):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        page = context.new_page()
        yield page
        context.close()
        browser.close()


def _wait_idle(page, timeout_s: float = 120, quiet_s: float = 2.0) -> None:
    """Wait until the script run has finished: the 'running' status widget absent for ``quiet_s`` in a row."""
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        if page.locator('[data-testid="stStatusWidget"]').count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        page.wait_for_timeout(200)
    raise AssertionError("the app did not finish its script run in time")


def _shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = page.evaluate("() => Math.max(...Array.from(document.querySelectorAll('*')).map(e => e.scrollHeight))")
    page.set_viewport_size({"width": 1400, "height": min(max(int(height), 1000), 6000)})
    page.wait_for_timeout(800)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    return path


def test_profile_in_a_real_browser(server, browser_page, tmp_path):
    page = browser_page
    page.goto(f"{server}/profile")
    page.get_by_role("button", name="Run profile").wait_for(timeout=60_000)
    _wait_idle(page)
    # fp32 on the CPU (the form's dtype selectbox), everything else at its default (64², schedule 1/1/3)
    page.get_by_label("dtype", exact=True).first.click()
    page.get_by_role("option", name="fp32", exact=True).click()
    page.get_by_role("button", name="Run profile").click()
    # the run's own heading (not the progress bar's text), then the page's last section: the run is drawn (the
    # first of each: while a rerun draws, the previous run's elements stay beside the new ones, see below)
    page.get_by_role("heading", name="64_fp32_cold_eager").first.wait_for(timeout=120_000)
    page.get_by_role("heading", name="5 · Take it with you").first.wait_for(timeout=60_000)
    # count only once the script run has ended: while a rerun draws, Streamlit keeps the previous run's elements
    # (stale) beside the new ones, so a count read mid-rerun can see a section twice
    _wait_idle(page)
    assert page.get_by_role("heading", name="4 · What to change").count() == 1
    chart = page.locator('[data-testid="stVegaLiteChart"]').first
    chart.locator("canvas, svg").first.wait_for(timeout=60_000)
    assert page.get_by_text("Self CPU time total").count() >= 1
    with page.expect_download(timeout=60_000) as info:
        page.locator(".st-key-png_profile_timeline button").click()  # our button, keyed; not the chart toolbar's
    target = tmp_path / info.value.suggested_filename
    info.value.save_as(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.name.endswith("_timeline.png")
    _shot(page, "profile")


def test_sweep_shows_progress_and_cancels(server, browser_page):
    page = browser_page
    page.goto(f"{server}/overhead")
    page.get_by_role("button", name="Run sweep").wait_for(timeout=60_000)
    _wait_idle(page)
    page.get_by_role("button", name="Run sweep").click()
    page.locator('[data-testid="stProgress"]').first.wait_for(timeout=60_000)
    page.locator(".st-key-cancel_sweep button").click()
    page.get_by_text("Cancelled after").wait_for(timeout=120_000)


def test_screenshot_every_page(server, browser_page):
    page = browser_page
    for name in PAGES:
        page.goto(f"{server}/{name}")
        page.locator('[data-testid="stMain"]').wait_for(timeout=60_000)
        page.locator("h1").first.wait_for(timeout=60_000)
        _wait_idle(page)
        exceptions = page.locator('[data-testid="stException"]')
        assert exceptions.count() == 0, f"{name or 'home'}: {exceptions.first.inner_text()}"
        shot = _shot(page, name or "home")
        assert shot.stat().st_size > 10_000
        # a metric's value shows whole at this width (Streamlit cuts a longer one with an ellipsis)
        cut = page.locator('[data-testid="stMetricValue"]').evaluate_all(
            "els => els.filter(e => [e, ...e.querySelectorAll('*')].some(x => x.scrollWidth > x.clientWidth + 1))"
            ".map(e => e.innerText)")
        assert not cut, f"{name or 'home'}: metric values cut: {cut}"


FAKE_PERFETTO = """<script>
window.addEventListener("message", (e) => {
  if (e.data === "PING") { e.source.postMessage("PONG", "*"); return; }
  if (e.data && e.data.perfetto) {
    const p = e.data.perfetto;
    document.title = "got " + p.buffer.byteLength + " " + p.title + " " + p.fileName;
  }
});
</script>"""


def test_open_in_perfetto_hands_the_trace_over_by_postmessage(browser_page):
    """The Profile page's "Open in Perfetto UI" button, in Chromium: it opens ui.perfetto.dev (here a stand-in page
    served by Playwright's router: nothing leaves the machine), PINGs until it answers PONG, then posts the trace's
    bytes with the run's name; the stand-in sees exactly the trace's size. A hostile run name stays a string."""
    from profiling_core.present.export import PERFETTO_UI, perfetto_open_html
    trace = (H200 / "64_bf16_cold_eager.json").read_bytes()
    name = 'evil</script><img src=x onerror=alert(1)>"'
    ctx = browser_page.context.browser.new_context()
    try:
        ctx.route(f"{PERFETTO_UI}/**", lambda route: route.fulfill(status=200, content_type="text/html",
                                                                  body=FAKE_PERFETTO))
        page = ctx.new_page()
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.set_content(perfetto_open_html(trace, name, "trace.json"))
        with ctx.expect_page() as popup_info:
            page.click("#open")
        popup = popup_info.value
        popup.wait_for_function("document.title.startsWith('got ')", timeout=15000)
        assert popup.title() == f"got {len(trace)} {name} trace.json"
        page.wait_for_function("document.getElementById('status').textContent === 'sent to the Perfetto UI'")
        assert not dialogs
    finally:
        ctx.close()


def _newest_runs(n: int) -> list[str]:
    """The newest n run ids of the server's store, from the folders' meta.json (not through the app)."""
    import json
    metas = [json.loads((p / "meta.json").read_text()) for p in RUNS["dir"].iterdir()
             if p.is_dir() and not p.name.startswith(".")]
    return [m["run_id"] for m in sorted(metas, key=lambda m: m["started_at"])[-n:]]


def _clean(page, where: str) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, f"{where}: {exceptions.first.inner_text()}"
    warnings = [w for w in page.locator('[data-testid="stAlertContentWarning"]').all_inner_texts()
                if "Session State API" in w]
    assert not warnings, f"{where}: {warnings}"


# page, its action button, how many runs the action makes with the page's CPU defaults, the picker(s) that must
# show the newest run(s) afterwards (key, how many runs back: 1 = the newest)
ACTIONS = [
    ("variance", "Run 20-step profile", 1, [("variance_run", 1)]),
    ("dispatch", "Run cold + warm pair", 6, [("cw_cold", 2), ("cw_warm", 1), ("dispatch_run", 1)]),
    ("compile_vs_eager", "Run eager + compiled", 6, [("compile_chosen", 1)]),
    ("overhead", "Run sweep", 9, [("overhead_chosen", 1)]),
]


@pytest.mark.parametrize("name,button,made,pickers", ACTIONS, ids=[a[0] for a in ACTIONS])
def test_each_pages_action_shows_the_runs_it_made(server, browser_page, name, button, made, pickers):
    """Walk a page's main action in Chromium with its CPU defaults: afterwards its pickers show the runs it just made
    (read off the store, not the app), with no exception and no Session State warning; a screenshot is saved."""
    page = browser_page
    page.goto(f"{server}/{name}")
    page.get_by_role("button", name=button).wait_for(timeout=60_000)
    _wait_idle(page)
    before = len(_newest_runs(10_000))
    page.get_by_role("button", name=button).click()
    # the runs, read off the store (a one-run action on a quick machine can end before its progress bar is seen);
    # then the page: its progress bar gone and its script run ended
    deadline = time.monotonic() + 300
    while len(_newest_runs(10_000)) < before + made and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    page.locator('[data-testid="stProgress"]').first.wait_for(state="detached", timeout=120_000)
    _wait_idle(page)
    _clean(page, name)
    newest = _newest_runs(made)
    assert len(_newest_runs(10_000)) == before + made
    for key, back in pickers:
        box = page.locator(f".st-key-{key}")  # a selectbox shows its choice in its input's value
        text = box.inner_text() + " " + " ".join(box.locator("input").evaluate_all("els => els.map(e => e.value)"))
        assert newest[-back][-4:] in text, f"{name}: picker {key} does not show run {newest[-back]}: {text!r}"
    assert page.locator(".st-key-cancel_" + {"variance": "variance", "dispatch": "coldwarm",
                                             "compile_vs_eager": "compile", "overhead": "sweep"}[name]).count() == 0
    _shot(page, f"after_{name}")


def test_trace_lab_import_is_shown_at_once(server, browser_page):
    """Trace lab's import in Chromium: the uploaded trace becomes the run its picker and the sidebar show."""
    page = browser_page
    page.goto(server)  # (a fresh session's first load at /trace_lab shows Streamlit's file-based nav: see the note)
    page.locator("h1").first.wait_for(timeout=60_000)
    _wait_idle(page)
    page.goto(f"{server}/trace_lab")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').wait_for(state="attached", timeout=60_000)
    _wait_idle(page)
    before = len(_newest_runs(10_000))
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(
        str(H200 / "64_bf16_warm_eager_b8.json"))
    deadline = time.monotonic() + 120
    while len(_newest_runs(10_000)) < before + 1 and time.monotonic() < deadline:
        page.wait_for_timeout(300)
    page.get_by_text("Imported as run").wait_for(timeout=60_000)
    _wait_idle(page)
    _clean(page, "trace_lab")
    [new] = _newest_runs(1)
    box = page.locator(".st-key-lab_run")
    shown = " ".join(box.locator("input").evaluate_all("els => els.map(e => e.value)"))
    assert new[-4:] in shown, shown
    _shot(page, "after_trace_lab")
    page.locator('[data-testid="stSidebar"]').get_by_text(new).wait_for(timeout=30_000)  # the current run


def test_a_deep_link_as_the_first_visit_opens_the_page_in_the_app(tmp_path, browser_page):
    """A fresh server whose first visitor opens /runs directly (a bookmark, a reload): Streamlit would route it
    through the legacy pages/ directory (the page alone, a file-list navigation: "common", "streamlit app"); the
    page sends it through the app's frame, which opens /runs with the app's navigation and sidebar."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with _serve(runs) as url:
        ctx = browser_page.context.browser.new_context()
        try:
            page = ctx.new_page()
            page.goto(f"{url}/runs")
            page.get_by_role("heading", name="Runs", exact=True).wait_for(timeout=60_000)
            _wait_idle(page)
            page.locator('[data-testid="stSidebar"]').get_by_text("Run store:").wait_for(timeout=30_000)
            nav = page.locator('[data-testid="stSidebar"]').inner_text()
            assert "Overhead vs compute" in nav and "common" not in nav and "streamlit app" not in nav, nav
            assert page.url.rstrip("/").endswith("/runs")
        finally:
            ctx.close()

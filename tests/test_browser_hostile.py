"""One real browser over a trace with a hostile kernel name, run name and file name (tests/test_app_hostile_names.py):
Streamlit's own renderer, in Chromium, shows them as text on every page that names them: no link, no image, no
math, no request to the attacker's host, and the names readable as they are."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest_app import import_trace
from test_app_hostile_names import HOSTILE, SEEN, write_hostile_trace
from test_browser import CHROMIUM, CHROMIUM_ARGS, _serve, _wait_idle

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api", reason="no playwright package (pip install playwright)")
    folder = tmp_path_factory.mktemp("hostile")
    runs = folder / "runs"
    import_trace(runs, write_hostile_trace(folder), HOSTILE)
    with _serve(runs) as url:
        yield url


@pytest.mark.parametrize("name", ["", "profile", "variance", "dispatch", "runs"])
def test_hostile_names_render_as_text_in_chromium(hostile_server, name):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            requests = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(f"{hostile_server}/{name}")
            page.locator("h1").first.wait_for(timeout=60_000)
            _wait_idle(page)
            assert page.locator('[data-testid="stException"]').count() == 0
            app = page.locator('[data-testid="stApp"]')
            # (a heading's own anchor, href="#…", is a link to itself)
            assert app.locator('a[href*="attacker"]:not([href^="#"])').count() == 0
            assert app.locator('img[src*="attacker"], img[src="x"]').count() == 0
            assert app.locator(".katex").count() == 0
            assert [u for u in requests if "attacker" in u] == []
            shown = app.inner_text().replace("\u2060", "")
            assert SEEN in shown  # the sidebar's current run, the heading, the findings: the name as it is
        finally:
            browser.close()


STAND_IN_PERFETTO = """<script>
window.addEventListener("message", (e) => {
  if (e.data === "PING") { e.source.postMessage("PONG", "*"); return; }
  if (e.data && e.data.perfetto) {
    window.got = {bytes: e.data.perfetto.buffer.byteLength, title: e.data.perfetto.title,
                  fileName: e.data.perfetto.fileName};
  }
});
</script>"""


def test_the_perfetto_button_of_a_hostile_run_works_in_chromium(hostile_server):
    """The Profile page of a run named with ``<!--<script> </script>``, U+2028 and an ESC sequence: its "Open in
    Perfetto UI" button (in Streamlit's component frame) still runs, PINGs the Perfetto UI (a stand-in served by
    Playwright's router: nothing leaves the machine) and posts the trace with the run's name exactly as it is.
    ``<!--<script>`` in the page's script used to put Chromium's tokenizer in a state where the script never ended,
    so nothing of it ran."""
    from playwright.sync_api import sync_playwright
    from profiling_core.present.export import PERFETTO_UI
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            ctx.route(f"{PERFETTO_UI}/**", lambda route: route.fulfill(status=200, content_type="text/html",
                                                                      body=STAND_IN_PERFETTO))
            page = ctx.new_page()
            dialogs = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{hostile_server}/profile")
            page.locator("h1").first.wait_for(timeout=60_000)
            _wait_idle(page)
            deadline = time.monotonic() + 60
            while not (frames := [f for f in page.frames if f.query_selector("#open")]):
                assert time.monotonic() < deadline, "no Perfetto button on the page"
                page.wait_for_timeout(200)
            [frame] = frames
            with ctx.expect_page(timeout=30_000) as popup_info:
                frame.click("#open")
            popup = popup_info.value
            popup.wait_for_function("window.got !== undefined", timeout=30_000)
            got = popup.evaluate("window.got")
            assert got["title"] == HOSTILE and got["fileName"] == "trace.json" and got["bytes"] > 1000
            frame.wait_for_function("document.getElementById('status').textContent === 'sent to the Perfetto UI'")
            assert not dialogs
        finally:
            browser.close()

"""Shared fixtures and helpers for the AppTest suites. The fixtures reach every test through ``pytest_plugins`` in
conftest.py (a test names them as arguments, no import); the helpers (``app``, ``download``, ``import_trace``, ...)
are imported: ``from conftest_app import ...``.

- ``runs_dir``: a fresh run store per test (``PROFILING_RUNS_DIR``), so tests never see each other's runs.
- ``media``: captures the MediaFileManager AppTest creates, so a test can fetch what a download button
  serves (eager files and deferred callables alike) with ``download(at, key)``.
- ``seed_run``: imports a stored test trace into the store (fast: no worker, no torch).
- ``interrupted``: runs a page until a progress bar shows a text, then stops it as the next click does.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "streamlit_app.py")
DATA = ROOT / "tests" / "data"
CPU_TRACE = DATA / "cpu" / "64_fp32_warm_eager.json"
H200 = DATA / "h200"
TIMEOUT = 120  # a real profile in a fresh worker process takes ~5-10 s on CPU; a cold import more

FAST_PROFILE = {"size": 64, "dtype": "fp32", "device": "cpu", "wait": 0, "warmup_steps": 0, "active": 2}


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("PROFILING_RUNS_DIR", str(root))
    return root


class _Media:
    """Records every MediaFileManager AppTest makes (one per run); the latest serves the current page."""

    def __init__(self):
        self.managers = []

    def fetch(self, button) -> bytes:
        proto = button.proto
        mgr = self.managers[-1]
        url = mgr.execute_deferred(proto.deferred_file_id) if proto.deferred_file_id else proto.url
        if not url:
            raise AssertionError(f"download button {button.label!r} has neither a URL nor a deferred file")
        return mgr._storage.get_file(url.rsplit("/", 1)[-1]).content


@pytest.fixture
def media(monkeypatch):
    import streamlit.testing.v1.app_test as app_test_mod
    from streamlit.runtime.media_file_manager import MediaFileManager

    rec = _Media()

    class Recording(MediaFileManager):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            rec.managers.append(self)

    monkeypatch.setattr(app_test_mod, "MediaFileManager", Recording)
    return rec


def download(at, media: _Media, key: str) -> bytes:
    """The bytes the download button with widget key ``key`` serves."""
    buttons = [b for b in at.get("download_button") if b.proto.id.endswith(key) or key in b.proto.id]
    if not buttons:
        keys = [b.proto.id.rsplit("-", 1)[-1] for b in at.get("download_button")]
        raise AssertionError(f"no download button {key!r}; there are {keys}")
    return media.fetch(buttons[0])


def import_trace(runs_dir: Path, path: Path, name: str | None = None) -> str:
    from profiling_core import RunStore
    return RunStore(runs_dir).import_trace(path, name=name).run_id


@pytest.fixture
def seed_run(runs_dir):
    """Import the CPU test trace into the store; returns its run id."""
    return import_trace(runs_dir, CPU_TRACE, name="64_fp32_warm_eager")


def app(page: str | None = None, timeout: float = TIMEOUT):
    """An AppTest of the real entry script, switched to ``pages/<page>.py`` when given, and run."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    if page:
        at.switch_page(f"pages/{page}.py")
        at.run()
    return at


def errors_of(at) -> list[str]:
    return [e.value for e in at.exception] + [str(e.value) for e in at.error]


@pytest.fixture
def interrupted(monkeypatch):
    """``interrupted(at, shows)`` runs the page until a progress bar of it shows the text ``shows``, then stops it as
    the browser's next click does (a page that follows a job never ends on its own), keeping what it drew by then:
    what the user saw when clicking next."""
    import streamlit.testing.v1.local_script_runner as runner_mod

    real = runner_mod.require_widgets_deltas
    state = {"shows": None}

    def shown(runner) -> bool:
        for msg in list(runner.forward_msgs()):
            el = msg.delta.new_element if msg.HasField("delta") and msg.delta.HasField("new_element") else None
            if el is not None and el.WhichOneof("type") == "progress" and state["shows"] in el.progress.text:
                return True
        return False

    def require(runner, timeout=3):
        if state["shows"] is None:
            return real(runner, timeout)
        deadline = time.monotonic() + 60
        while not runner.script_stopped() and not shown(runner):
            assert time.monotonic() < deadline, f"the page never showed {state['shows']!r}"
            time.sleep(0.05)
        if not runner.script_stopped():
            runner.request_stop()
            runner.join()

    monkeypatch.setattr(runner_mod, "require_widgets_deltas", require)

    def run(at, shows):
        state["shows"] = shows
        try:
            return at.run()
        finally:
            state["shows"] = None

    return run


def chart_specs(at) -> list[dict]:
    """Each chart's spec, with its datasets back in as lists of rows (Streamlit sends them apart, as Arrow)."""
    import json

    import pyarrow as pa  # (Streamlit's own dependency)
    out = []
    for c in at.get("vega_lite_chart"):
        spec = json.loads(c.proto.spec)
        spec["datasets"] = {d.name: pa.ipc.open_stream(d.data.data).read_all().to_pylist() for d in c.proto.datasets}
        if isinstance(spec.get("data"), dict) and "values" in spec["data"]:
            spec["datasets"]["(inline)"] = spec["data"]["values"]
        out.append(spec)
    return out

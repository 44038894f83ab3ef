"""AppTest: every sweep page offers where its runs happen (this machine or a Ray cluster) through one control.

The control is only usable when Ray is installed; a bad address is refused under the form before any job starts, a
cluster that cannot be reached fails the sweep with a clear error and nothing in the store; a Ray sweep started from
a page lands its runs (a local Ray instance, bounded in time), and the page's Cancel reaches the Ray executor.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

from conftest_app import app, errors_of
from profiling_core.present import md_text

SWEEP_PAGES = {"overhead": "sweep", "compile_vs_eager": "compile", "dispatch": "cw"}
"""Each page that runs a sweep, and the key of its form's executor control."""
GO = {"overhead": "Run sweep", "compile_vs_eager": "Run eager + compiled",
      "dispatch": "Run cold + warm pair (schedule 0/0/3)"}


def _go(at, page):
    [btn] = [b for b in at.button if b.label == GO[page]]
    return btn


def _job_box(at):
    return [b for b in at.button if b.label == "Cancel"], [p.proto.text for p in at.get("progress")]


def _stored(root):
    """The run folders of the store on disk, each with its meta.json read as plain JSON, and what is staged."""
    runs = {p.name: json.loads((p / "meta.json").read_text()) for p in (root.iterdir() if root.is_dir() else ())
            if p.is_dir() and not p.name.startswith(".")}
    staged = list((root / ".staging").iterdir()) if (root / ".staging").is_dir() else []
    return runs, staged


@pytest.mark.parametrize("page", sorted(SWEEP_PAGES))
def test_each_sweep_page_offers_the_executor_local_by_default(runs_dir, page):
    pytest.importorskip("ray", reason="ray is not installed")
    at = app(page)
    assert not errors_of(at), errors_of(at)
    key = SWEEP_PAGES[page]
    ex = at.selectbox(key=f"{key}_executor")
    assert ex.value == "local" and not ex.disabled
    assert ex.options == ["this machine, one run after the other", "a Ray cluster, one task per run"]
    assert at.text_input(key=f"{key}_ray_address").value == ""
    assert at.selectbox(key=f"{key}_placement").value == "spread"
    assert at.number_input(key=f"{key}_retries").value == 1


@pytest.mark.parametrize("page", sorted(SWEEP_PAGES))
def test_without_ray_the_control_is_disabled_and_says_what_to_install(runs_dir, page, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError, as without the package
    at = app(page)
    assert not errors_of(at), errors_of(at)
    key = SWEEP_PAGES[page]
    assert at.selectbox(key=f"{key}_executor").disabled
    assert at.text_input(key=f"{key}_ray_address").disabled
    assert at.selectbox(key=f"{key}_placement").disabled and at.number_input(key=f"{key}_retries").disabled
    said = [c.value for c in at.caption if "Ray is not installed" in c.value]
    assert said == [md_text("Ray is not installed in this Python: pip install -e '.[ray]' (or pip install "
                            "'ray[default]')") + ", to run the sweep on a Ray cluster."], said


BAD_ADDRESSES = ["head-node", "http://head:8265", "head:0", "head:70000", "a b:6379", "<b>x</b>:1"]


@pytest.mark.parametrize("page,address", [("overhead", a) for a in BAD_ADDRESSES]
                         + [("compile_vs_eager", "head-node"), ("dispatch", "http://head:8265")])
def test_an_address_that_does_not_parse_is_refused_before_anything_starts(runs_dir, page, address):
    pytest.importorskip("ray", reason="ray is not installed")
    at = app(page)
    key = SWEEP_PAGES[page]
    at.selectbox(key=f"{key}_executor").set_value("ray")
    at.text_input(key=f"{key}_ray_address").set_value(address)
    _go(at, page).click().run()
    said = [e.value for e in at.error]
    assert len(said) == 1 and said[0].startswith(md_text("ray_address must be empty")), said
    assert said[0].endswith(md_text(f"or ray://HOST:PORT (Ray Client), got {address!r}")), said
    assert not at.exception
    assert _job_box(at) == ([], [])  # no job started
    # what was typed is kept for the user to correct
    assert at.selectbox(key=f"{key}_executor").value == "ray"
    assert at.text_input(key=f"{key}_ray_address").value == address
    assert _stored(runs_dir) == ({}, [])


@pytest.mark.ray
def test_no_cluster_at_the_address_fails_the_sweep_clearly_and_keeps_nothing(runs_dir):
    pytest.importorskip("ray", reason="ray is not installed")
    import socket
    with socket.socket() as s:  # a port of this machine on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    at = app("overhead")
    at.multiselect(key="sweep_sizes").set_value([64])
    at.selectbox(key="sweep_device").set_value("cpu")
    at.selectbox(key="sweep_executor").set_value("ray")
    at.text_input(key="sweep_ray_address").set_value(f"127.0.0.1:{port}")
    t0 = time.monotonic()
    _go(at, "overhead").click().run(timeout=60)
    assert time.monotonic() - t0 < 45  # Ray's own connect waits minutes; the page says it at once
    said = [e.value for e in at.error]
    assert len(said) == 1 and said[0].startswith("**The sweep failed**: " + md_text(
        f"no Ray cluster is reachable at 127.0.0.1:{port} (Connection refused)")), said
    assert said[0].endswith(md_text("leave the address empty to start a local Ray instance; nothing ran")), said
    assert _stored(runs_dir) == ({}, [])
    assert at.text_input(key="sweep_ray_address").value == f"127.0.0.1:{port}"


@pytest.fixture
def node_dir(tmp_path, monkeypatch):
    """The local Ray instance's processes inherit this one's environment: their node store and lock folder are
    the test's own."""
    from profiling_core.run.cluster import ENV_NODE_DIR
    monkeypatch.setenv(ENV_NODE_DIR, str(tmp_path / "node"))
    monkeypatch.setenv("PROFILING_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path / "node"


def _ray_sweep_form(at, sizes):
    at.multiselect(key="sweep_sizes").set_value(sizes)
    at.multiselect(key="sweep_modes").set_value(["off"])
    at.selectbox(key="sweep_dtype").set_value("fp32")
    at.selectbox(key="sweep_device").set_value("cpu")
    at.slider(key="sweep_active").set_value(1)
    at.number_input(key="sweep_repeats").set_value(1)
    at.selectbox(key="sweep_executor").set_value("ray")  # the address left empty: a local Ray instance


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_sweep_started_from_the_page_lands_its_runs(runs_dir, node_dir):
    pytest.importorskip("ray", reason="ray is not installed")
    at = app("overhead", timeout=60)  # Ray's start-up included
    _ray_sweep_form(at, [64])
    _go(at, "overhead").click().run()
    assert not errors_of(at), errors_of(at)
    assert any(s.value.startswith("Done: 1 run(s)") for s in at.success), [s.value for s in at.success]
    runs, staged = _stored(runs_dir)
    assert staged == [] and len(runs) == 1
    [(run_id, meta)] = runs.items()
    assert meta["config"]["size"] == 64 and meta["status"] == "ok"
    assert meta["node"]["hostname"] and meta["node"]["ray_node_id"]  # it ran as a Ray task, on a node
    assert meta["node"]["pid"] != os.getpid()
    assert json.loads((runs_dir / run_id / "trace.json").read_text())["traceEvents"]
    assert at.multiselect(key="overhead_chosen").value == [run_id]  # the page charts the sweep it ran
    assert [p for p in node_dir.iterdir() if not p.name.startswith(".")] == []  # the node kept none


@pytest.mark.ray
@pytest.mark.slow
def test_cancel_on_the_page_reaches_a_ray_sweep(runs_dir, node_dir, interrupted):
    """The device is held by this test, so the sweep's tasks wait for it on their node; the page's Cancel stops
    them: the sweep ends cancelled, with nothing in the store."""
    pytest.importorskip("ray", reason="ray is not installed")
    from profiling_core.run import device_lock
    with device_lock("cpu", what="the test holding the device"):
        at = app("overhead", timeout=60)
        _ray_sweep_form(at, [64, 128])
        _go(at, "overhead").click()
        interrupted(at, "queued on the cluster")
        cancel, progress = _job_box(at)
        assert len(cancel) == 1 and "on a local Ray instance" in progress[0], progress
        t0 = time.monotonic()
        cancel[0].click()
        at.run(timeout=60)
        assert time.monotonic() - t0 < 45
    assert not errors_of(at), errors_of(at)
    said = [w.value for w in at.warning]
    assert any(w.startswith("Cancelled after 0 run(s)") for w in said), said
    assert _job_box(at) == ([], [])
    assert _stored(runs_dir) == ({}, [])

"""AppTest: after a page's own action, the page's run pickers, the sidebar's current run and the toast all name the
run(s) it just made, in the same session (issue 11: pickers used to keep an older run), and Streamlit never warns
that a widget had both a default and a Session State value."""
from __future__ import annotations

import pytest

from conftest_app import app, errors_of, import_trace, H200
from test_app_profile import fill_profile_form, submit

SESSION_STATE_WARNING = "Session State API"


def _warnings(at) -> list[str]:
    return [w.value for w in at.warning if SESSION_STATE_WARNING in str(w.value)]


def _newest(runs_dir, n=1) -> list[str]:
    """The newest n run ids in the store, read off the folders' meta.json (independent of the app)."""
    import json
    metas = [json.loads((p / "meta.json").read_text()) for p in runs_dir.iterdir()
             if p.is_dir() and not p.name.startswith(".")]
    metas.sort(key=lambda m: m["started_at"])
    return [m["run_id"] for m in metas[-n:]]


@pytest.mark.slow
def test_variance_run_is_shown_at_once(runs_dir):
    old = import_trace(runs_dir, H200 / "4096_bf16_warm_eager_a20.json", "older_run")
    at = app("variance")
    assert at.selectbox(key="variance_run").value == old
    at.selectbox(key="variance_run").set_value(old).run()  # the user's own choice, kept until a new run comes
    fill_profile_form(at, prefix="variance_form", active=2)
    submit(at, "Run 20-step profile")
    assert not errors_of(at), errors_of(at)
    [new] = _newest(runs_dir)
    assert new != old
    assert at.selectbox(key="variance_run").value == new
    assert at.session_state["current_run_id"] == new                    # what the sidebar shows as the current run
    assert any(new in t.value for t in at.toast)                       # "Run … saved" names the same run
    assert not _warnings(at)


@pytest.mark.slow
def test_cold_warm_pair_is_shown_at_once(runs_dir):
    import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "64_bf16_cold_eager")
    import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "4096_bf16_warm_eager")
    at = app("dispatch")
    at.select_slider(key="cw_size").set_value(64)
    at.selectbox(key="cw_dtype").set_value("fp32")
    at.selectbox(key="cw_device").set_value("cpu")
    [go] = [b for b in at.button if b.label.startswith("Run cold + warm pair")]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    cold, warm = _newest(runs_dir, 2)
    assert (at.selectbox(key="cw_cold").value, at.selectbox(key="cw_warm").value) == (cold, warm)
    assert at.selectbox(key="dispatch_run").value == warm  # the page's main picker follows the current run
    assert not _warnings(at)


def test_a_users_choice_stays_until_a_new_run_comes(runs_dir):
    a = import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "a")
    b = import_trace(runs_dir, H200 / "64_bf16_warm_eager_b8.json", "b")
    at = app("variance")
    assert at.selectbox(key="variance_run").value == b  # the newest
    at.selectbox(key="variance_run").set_value(a).run()
    at.run()
    assert at.selectbox(key="variance_run").value == a
    assert not errors_of(at) and not _warnings(at)

"""AppTest: a Run click owns one job. While it runs, a second click starts nothing and the page says so; the one job
stays shown with its Cancel button, and a cancel reaches it even while it waits for a busy device."""
from __future__ import annotations

import os
import time

from conftest_app import app, errors_of
from profiling_core.present import md_text
from test_app_profile import fill_profile_form


def _run_button(at):
    [btn] = [b for b in at.button if b.label == "Run profile"]
    return btn


def _job_box(at):
    """The job boxes the page shows: its Cancel buttons and its progress texts."""
    return ([b for b in at.button if b.label == "Cancel"],
            [p.proto.text for p in at.get("progress")])


def test_a_second_run_click_starts_nothing_and_the_one_job_is_shown_and_cancelled(runs_dir, interrupted, tmp_path,
                                                                                    monkeypatch):
    from profiling_core.run import device_lock
    monkeypatch.setenv("PROFILING_LOCK_DIR", str(tmp_path / "locks"))
    with device_lock("cpu", what="the test holding the device"):  # the click's job waits for the device
        at = app("profile")
        fill_profile_form(at)
        _run_button(at).click()
        interrupted(at, "waiting for device lock")
        cancel, progress = _job_box(at)
        assert len(cancel) == 1 and len(progress) == 1, progress
        waits = md_text("Profiling 64_fp32_cold_eager: waiting for device lock 'cpu' held by pid ")
        assert progress[0].startswith(waits) and md_text("(the test holding the device)") in progress[0], progress
        assert [w.value for w in at.warning] == []

        _run_button(at).click()  # the second click, while the first one's job waits
        interrupted(at, "waiting for device lock")
        cancel, progress = _job_box(at)
        assert len(cancel) == 1 and len(progress) == 1, progress  # one job, the first click's, still shown
        said = [w.value for w in at.warning]
        refused = md_text("Profiling 64_fp32_cold_eager was already running, so 1 more click started nothing: one run "
                          "at a time here. Wait for it to end, or cancel it, then start another.")
        assert said == [refused], said

        t0 = time.monotonic()
        cancel[0].click()
        at.run(timeout=60)  # the old page went on waiting for the device: AppTest's time-out
        assert time.monotonic() - t0 < 30
    assert not errors_of(at), errors_of(at)
    assert _job_box(at) == ([], [])
    said = [w.value for w in at.warning]
    assert len(said) == 2 and said[1] == refused, said
    assert said[0].startswith("Cancelled: " + md_text("64_fp32_cold_eager (")) and said[0].endswith(md_text(
        f"for device cpu (held by pid {os.getpid()} (the test holding the device)); nothing was started")), said
    assert [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")] == []  # nothing ran, nothing kept
    at.run()  # and nothing left running under the page: it draws no job
    assert _job_box(at) == ([], [])

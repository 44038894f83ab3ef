"""AppTest: the home page (thin frame + shared sidebar)."""
from __future__ import annotations

from conftest_app import app, errors_of


def test_home_renders_on_an_empty_store(runs_dir):
    at = app()
    assert not errors_of(at)
    text = " ".join(m.value for m in at.markdown)
    assert "SQL engine" in text and "Run store" in text and str(runs_dir) in text
    assert "No runs yet" in " ".join(c.value for c in at.caption)
    assert at.metric[1].label == "torch"


def test_home_lists_recent_runs_and_the_engine(seed_run):
    at = app()
    assert not errors_of(at)
    assert seed_run in list(at.dataframe[0].value["run_id"])
    engine_line = next(m.value for m in at.markdown if "SQL engine" in m.value)
    assert "sqlite" in engine_line or "perfetto" in engine_line
    assert "curl" not in engine_line and "\n" not in engine_line.split("—", 1)[1]  # one plain line
    import os
    cpu_line = next(m.value for m in at.markdown if "**CPU**" in m.value)
    assert f"{os.cpu_count()} cores" in cpu_line and "threads" in cpu_line  # the CPU model and thread count
    sidebar = " ".join(m.value for m in at.sidebar.markdown)
    assert seed_run in sidebar


def test_peaks_of_another_machine_are_not_called_this_machines(runs_dir):
    """A store holding an H200's calibration (imported with its runs) on a machine without that GPU: the table names
    the H200 as the device measured, marks no row as this machine's, and says this machine's device is not
    calibrated (the page called them "this device's peaks ... on this machine")."""
    import json
    from conftest_app import DATA
    from profiling_core.store import DevicePeaks, PeakBook
    peaks = DevicePeaks.from_dict(json.loads((DATA / "h200_verdicts" / "peaks.json").read_text()))
    PeakBook(runs_dir).save(peaks)
    at = app()
    assert not errors_of(at)
    [table] = [d.value for d in at.dataframe if "measured best" in d.value.columns]
    assert set(table["device"]) == {"NVIDIA H200"} and not table["here"].any()
    assert "This device's peaks" not in [s.value for s in at.subheader]
    from profiling_core.present import md_text
    notes = [c.value for c in at.caption if md_text("None of them is of this machine's device") in c.value]
    assert len(notes) == (0 if "H200" in next(m.value for m in at.markdown if "**Device name**" in m.value) else 1)


def test_an_unreadable_current_run_leaves_the_rest_of_home_drawn(runs_dir):
    """The newest run's trace cut off mid-file: the SQL engine line asks for its session, whose error box and stop
    (meant for a page that shows the run) ended the Home page there, past an ``except Exception`` that a stop is not:
    no peaks, no Calibrate button, no recent runs, from which the run could be opened or deleted. The line now says
    the engine is unavailable and why, and the rest of the page is drawn."""
    from conftest_app import H200, import_trace
    rid = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "cut off")
    trace = runs_dir / rid / "trace.json"
    trace.write_bytes(trace.read_bytes()[:5000])
    at = app()
    assert not at.exception, [e.value for e in at.exception]
    assert {"Measured peaks", "Recent runs"} <= {s.value for s in at.subheader}
    assert [b.label for b in at.button if b.label == "Calibrate this device"]
    [recent] = [d.value for d in at.dataframe if "run_id" in d.value.columns]
    assert list(recent["run_id"]) == [rid]
    engine_line = next(m.value for m in at.markdown if "SQL engine" in m.value)
    assert "unavailable" in engine_line

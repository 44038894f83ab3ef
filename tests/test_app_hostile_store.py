"""AppTest: hostile files in the run store and its calibrations folder leave Home and Runs up, each bad file listed
with its reason.

A directory named meta.json used to make the Runs page raise ("Is a directory"); a directory in .calibrations/, a
calibration whose copy_bytes is 10**400 (OverflowError) or whose dtype has no median (KeyError) made Home raise.
"""
from __future__ import annotations

import json

import pytest

from conftest_app import CPU_TRACE, app, errors_of, import_trace
from profiling_core.present import md_text
from hostile_store import (BAD_PEAKS, ESCAPING_PEAKS, GOOD_PEAKS, LONE_SURROGATES_META, LONE_SURROGATES_PEAKS,
                           NOT_READABLE, make)

CASES = {**{f"file_{k}": v for k, v in NOT_READABLE.items()}, **{f"peaks_{k}": v for k, v in BAD_PEAKS.items()}}


def _warnings(at) -> str:
    return " ".join(w.value for w in at.warning)


@pytest.mark.parametrize("kind", ["file_directory", "peaks_copy_bytes_10e400", "peaks_no_median_for_a_dtype",
                                  "peaks_control_chars_in_a_key", "peaks_bandwidth_nan"])
def test_home_lists_a_bad_calibration_with_its_reason(runs_dir, kind):
    folder = runs_dir / ".calibrations"
    make(folder / "good.json", lambda p: p.write_text(json.dumps(GOOD_PEAKS)))
    maker, reason = CASES[kind]
    make(folder / "bad.json", maker)
    at = app()
    assert not errors_of(at), errors_of(at)
    peaks = next(df.value for df in at.dataframe if "measured best" in df.value.columns)
    assert set(peaks["device"]) == {"Test CPU"}
    assert md_text("Unreadable calibration file bad.json: ") in _warnings(at)
    assert md_text(reason) in _warnings(at), (reason, _warnings(at))


def test_home_renders_with_every_hostile_calibration_at_once(runs_dir):
    folder = runs_dir / ".calibrations"
    for kind, (maker, _) in CASES.items():
        make(folder / f"{kind}.json", maker)
    make(folder / "escaping.json", lambda p: p.write_text(json.dumps(ESCAPING_PEAKS)))
    folder.joinpath(b"\xff\xfe-not-utf8.json".decode("utf-8", "surrogateescape")).write_text("{")
    at = app()
    assert not errors_of(at), errors_of(at)
    assert len([w for w in at.warning if "Unreadable calibration file" in w.value]) == len(CASES) + 1
    peaks = next(df.value for df in at.dataframe if "measured best" in df.value.columns)
    assert len(set(peaks["device"])) == 1 and "Test CPU" in peaks["device"].iloc[0]


@pytest.mark.parametrize("kind", sorted(NOT_READABLE))
def test_the_runs_page_lists_a_meta_json_that_cannot_be_read(runs_dir, kind):
    good = import_trace(runs_dir, CPU_TRACE, "good")
    bad = import_trace(runs_dir, CPU_TRACE, "bad")
    (runs_dir / bad / "meta.json").unlink()
    maker, reason = NOT_READABLE[kind]
    make(runs_dir / bad / "meta.json", maker)
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    listed = dict(zip(at.dataframe[0].value["run_id"], at.dataframe[0].value["problem"]))
    assert list(listed) == [bad] and reason in listed[bad], listed
    assert any("1 run folder(s) cannot be read" in w.value for w in at.warning)
    assert any(o.endswith(f"  ·  {good[-4:]}") for b in at.selectbox for o in b.options)  # the readable run's label


@pytest.mark.parametrize("meta", [
    {"config": {"size": 10 ** 400}}, {"timings": {"wall_s": "Infinity"}}, {"timings": {"wall_s": -1.0}},
    {"device": {"cpu_threads": 10 ** 30}}, {"machine_load": {"load_1min_before": "NaN"}},
], ids=["size-10e400", "wall_s-inf", "wall_s-negative", "threads-10e30", "load-nan"])
def test_numbers_out_of_range_in_meta_json_make_the_run_corrupt(runs_dir, meta):
    """What the listings read from meta.json is bounded as the calibrations are: a run whose numbers are not, is
    corrupt with the field named, and the pages that list runs stay up."""
    good = import_trace(runs_dir, CPU_TRACE, "good")
    bad = import_trace(runs_dir, CPU_TRACE, "bad")
    path = runs_dir / bad / "meta.json"
    text = json.dumps({**json.loads(path.read_text()), **meta})
    path.write_text(text.replace('"Infinity"', "Infinity").replace('"NaN"', "NaN"))
    field = next(iter(meta.values()))
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    listed = dict(zip(at.dataframe[0].value["run_id"], at.dataframe[0].value["problem"]))
    assert list(listed) == [bad] and f"$.{next(iter(meta))}.{next(iter(field))}" in listed[bad], listed
    at = app()
    assert not errors_of(at), errors_of(at)
    assert list(at.dataframe[-1].value["run_id"]) == [good]


def test_lone_surrogates_in_a_calibration_and_a_meta_json_read_as_replacement_characters(runs_dir):
    """``"\\ud800"`` is valid JSON but no Unicode text: sent to the browser it raised UnicodeEncodeError. The store's
    reader gives U+FFFD for it, as the trace loader does."""
    make(runs_dir / ".calibrations" / "c.json", lambda p: p.write_text(LONE_SURROGATES_PEAKS))
    rid = import_trace(runs_dir, CPU_TRACE, "odd")
    (runs_dir / rid / "meta.json").write_text(LONE_SURROGATES_META)
    at = app()
    assert not errors_of(at), errors_of(at)
    peaks = next(df.value for df in at.dataframe if "measured best" in df.value.columns)
    assert set(peaks["device"]) == {"Test CPU \ufffd"}
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    assert list(at.dataframe[0].value["name"]) == ["n \ufffd"]

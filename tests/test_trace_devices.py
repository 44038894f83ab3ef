"""A trace's devices (Kineto's top-level ``deviceProperties``) as both engines' sessions give them, against a plain
JSON scan of each test trace."""
from __future__ import annotations

import json

import pytest

from conftest import DATA
from profiling_core.trace import TraceSession, open_trace

TRACES = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json", ".json.gz")) and "tp_tables" not in p.parts
                and not p.name.endswith(".meta.json") and "expected" not in p.parts
                and "findings_snapshot" not in p.parts and p.name != "peaks.json")


def scanned(path):
    import gzip
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    props = doc.get("deviceProperties") if isinstance(doc, dict) else None
    return [(d.get("id"), d.get("name")) for d in props or []]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_both_readings_name_the_devices_the_json_names(path):
    expected = scanned(path)
    try:
        with open_trace(path, engine="sqlite") as s:
            mirror = [(d["id"], d["name"]) for d in s.devices]
    except Exception:  # noqa: BLE001 - a bad-input fixture: nothing to name
        pytest.skip("not a loadable trace")
    lazy = TraceSession(str(path), "perfetto", "test: the on-demand reading", backend=None).devices
    assert mirror == expected == [(d["id"], d["name"]) for d in lazy]


def test_the_h200_traces_name_the_h200_with_its_compute_capability():
    with open_trace(DATA / "h200_verdicts" / "mlp_fp32_eager.json", engine="sqlite") as s:
        assert s.devices == [{"id": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]


@pytest.mark.parametrize("props", ['"H200"', '[1, 2]', '{"name": "x"}', '[{"id": "0", "name": 7}]', 'null'])
def test_device_properties_of_the_wrong_shape_name_nothing_and_refuse_nothing(tmp_path, props):
    p = tmp_path / "t.json"
    p.write_text('{"deviceProperties": ' + props + ', "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, '
                 '"ts": 1, "dur": 2}]}')
    with open_trace(p, engine="sqlite") as s:
        devs = s.devices
        assert len(s.query("select * from slice")) == 1
    assert devs in ([], [{"id": None, "name": None, "compute_capability": None}])


_GPU = '[{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0}]'
_EVENT = '{"ph": "X", "name": %s, "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": %s}'
_BAIT = '\\"deviceProperties\\": [{\\"id\\": 7, \\"name\\": \\"bait\\"}]'  # the key's text inside a JSON string


def _doc(before: str = "", events: tuple = (), after: str = "") -> str:
    evs = ", ".join(events) or _EVENT % ('"a"', "{}")
    return "{" + before + '"traceEvents": [' + evs + "]" + after + "}"


HOSTILE = {  # name: the file's text; each is read by the perfetto session and the mirror, and scanned with json
    "first": _doc(f'"deviceProperties": {_GPU}, '),
    "last": _doc(after=f', "deviceProperties": {_GPU}'),
    "absent": _doc('"schemaVersion": 1, '),
    "key_text_in_an_event_name_only": _doc(events=(_EVENT % (f'"x {_BAIT}"', "{}"),)),
    "key_text_in_a_string_before_the_real_key": _doc(
        f'"traceName": "{_BAIT}", ', (_EVENT % (f'"{_BAIT}"', "{}"),), f', "deviceProperties": {_GPU}'),
    "key_in_an_events_args": _doc(events=(_EVENT % ('"a"', '{"deviceProperties": ' + _GPU + "}"),)),
    "key_in_another_top_level_object": _doc('"distributedInfo": {"deviceProperties": ' + _GPU + "}, "),
    "bare_list_of_events": "[" + _EVENT % ('"a"', '{"deviceProperties": ' + _GPU + "}") + "]",
    "lone_surrogate_in_an_event": _doc(f'"deviceProperties": {_GPU}, ', (_EVENT % ('"a\\ud800b"', "{}"),)),
    "an_event_list_of_one_long_string": _doc(
        f'"deviceProperties": {_GPU}, ', (_EVENT % ('"' + "]}, " * 50_000 + _BAIT + '"', "{}"),)),
}


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_device_properties_are_read_from_the_top_level_only_wherever_they_are(tmp_path, name, gz):
    import gzip
    text = HOSTILE[name]
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    doc = json.loads(text)
    expected = [(d["id"], d["name"]) for d in (doc.get("deviceProperties") or [])] if isinstance(doc, dict) else []
    assert expected in ([], [(0, "NVIDIA H200")])
    lazy = TraceSession(str(p), "perfetto", "test: the on-demand reading", backend=None).devices
    with open_trace(p, engine="sqlite") as s:
        mirror = s.devices
    assert [(d["id"], d["name"]) for d in lazy] == expected
    assert lazy == mirror


def test_a_file_that_is_not_json_names_no_devices(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"deviceProperties": ' + _GPU + ', "traceEvents": [{"ph": "X",')  # cut off mid-event
    assert TraceSession(str(p), "perfetto", "test: the on-demand reading", backend=None).devices == []


RECORDING_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")


def scanned_options(path):
    import gzip
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return sorted(k for k in RECORDING_OPTIONS if isinstance(doc, dict) and doc.get(k) in (1, True)
                  and not isinstance(doc.get(k), float))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_both_readings_give_the_options_the_trace_was_recorded_with(path):
    """torch writes each torch.profiler option that was on at the document's top level (``"profile_memory": 1``):
    both readings give those, against a plain scan."""
    expected = scanned_options(path)
    try:
        s = open_trace(path, engine="sqlite")
    except Exception:  # noqa: BLE001 - a bad-input fixture
        pytest.skip("not a loadable trace")
    with s:
        mirror = sorted(s.recorded_with)
    lazy = sorted(TraceSession(str(path), "perfetto", "test: the on-demand reading", backend=None).recorded_with)
    assert mirror == expected == lazy


def test_the_memory_traces_say_they_recorded_memory():
    assert "profile_memory" in scanned_options(DATA / "h200_memory" / "ro.json")
    assert scanned_options(DATA / "h200" / "64_bf16_cold_eager.json") == []


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("0", False), ("false", False), ('"1"', False),
                                       ("2", False), ("null", False), ("1.0", False)])
def test_only_an_option_written_as_on_counts(tmp_path, value, on):
    p = tmp_path / "t.json"
    p.write_text('{"profile_memory": ' + value + ', "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, '
                 '"ts": 1, "dur": 2}]}')
    with open_trace(p, engine="sqlite") as s:
        assert (s.recorded_with == ["profile_memory"]) is on
    assert (TraceSession(str(p), "perfetto", "test", backend=None).recorded_with == ["profile_memory"]) is on

"""Hostile files where the store, the calibrations and the device lock keep their small files, and behind
``analyze --peaks FILE``: each is listed (or refused) with its reason, nothing blocks or reads without end, and the
CLI prints no control character it found in a file.

The files are made with plain os calls (tests/hostile_store.py); the CLI runs as a user runs it, in a subprocess,
and its bytes are scanned for control characters.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DATA, ROOT
from hostile_store import (BAD_PEAKS, ESC, ESCAPED, ESCAPING_PEAKS, GOOD_PEAKS, LONE_SURROGATES_META,
                           LONE_SURROGATES_PEAKS, NOT_READABLE, import_tiny, make, raw_controls)

CPU_TRACE = DATA / "cpu" / "64_fp32_warm_eager.json"


def _cap_memory():
    """What a runaway read may take in a child process before it fails, so the test never takes the machine down."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def cli(*args, env=None, timeout=120, limit_memory=False):
    """``python -m profiling_core ARGS`` as a user runs it: (exit status, stdout text, stderr text)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    p = subprocess.run([sys.executable, "-m", "profiling_core", *map(str, args)], capture_output=True, env=env,
                       timeout=timeout, preexec_fn=_cap_memory if limit_memory else None)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


# --- meta.json -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(NOT_READABLE))
def test_a_meta_json_that_cannot_be_read_is_listed_as_corrupt_by_ls(tmp_path, kind):
    """A directory named meta.json used to make ``ls`` exit 2 (``Is a directory``): every kind of path is now a
    corrupt run with its reason, beside the sound one."""
    root = tmp_path / "runs"
    good, bad = import_tiny(root, "good"), import_tiny(root, "bad")
    (bad / "meta.json").unlink()
    maker, reason = NOT_READABLE[kind]
    make(bad / "meta.json", maker)
    rc, out, err = cli("ls", "--json", "--store", root)
    assert rc == 0, err
    listed = {r["run_id"]: r for r in json.loads(out)}
    assert listed[good.name]["status"] == "ok"
    assert listed[bad.name]["status"] == "corrupt" and reason in listed[bad.name]["error"], listed[bad.name]
    assert listed[bad.name]["error"].startswith("meta.json ")
    rc, out, err = cli("ls", "--store", root)
    assert rc == 0 and err == "", err
    [line] = [ln for ln in out.splitlines() if ln.startswith(bad.name)]
    assert "corrupt" in line and reason in line


def test_a_table_that_cannot_be_read_reads_as_no_table(tmp_path):
    """table.txt (the Profile page shows it, ``show`` prints it) goes through the same reader: a FIFO used to block
    the reader for ever, /dev/zero to fill memory; bytes that are not UTF-8 used to raise UnicodeDecodeError."""
    run = import_tiny(tmp_path / "runs", "r")
    table = run / "table.txt"
    code = ("import sys; from profiling_core import RunStore\n"
            "print(ascii(RunStore(sys.argv[1]).load(sys.argv[2]).table_text()))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for maker, want in [(lambda p: os.mkfifo(p), "''"), (lambda p: os.symlink("/dev/zero", p), "''"),
                        (lambda p: p.write_bytes(b"Name \xff\xfe Self CPU"), "'Name \\ufffd\\ufffd Self CPU'")]:
        with contextlib.suppress(FileNotFoundError):
            table.unlink()
        maker(table)
        try:
            p = subprocess.run([sys.executable, "-c", code, str(run.parent), run.name], capture_output=True, text=True,
                               env=env, timeout=60, preexec_fn=_cap_memory)
        except subprocess.TimeoutExpired:
            pytest.fail(f"reading a table.txt made by {maker} still ran after 60 s")
        assert p.returncode == 0 and p.stdout.strip() == want, (p.stdout, p.stderr[-500:])


# --- calibrations --------------------------------------------------------------------------------------------------

def _calibrations(root: Path) -> Path:
    return root / ".calibrations"


@pytest.mark.parametrize("kind", sorted(NOT_READABLE) + sorted(BAD_PEAKS))
def test_a_bad_calibration_file_is_listed_with_its_reason_by_calibrate_list(tmp_path, kind):
    """A directory in .calibrations/ used to break ``calibrate --list`` (exit 2), ``copy_bytes`` of 10**400 and a
    dtype without a median printed a traceback: each is an unreadable calibration with its reason now, beside the
    good one."""
    root = tmp_path / "runs"
    folder = _calibrations(root)
    make(folder / "good.json", lambda p: p.write_text(json.dumps(GOOD_PEAKS)))
    maker, reason = {**NOT_READABLE, **BAD_PEAKS}[kind]
    make(folder / "bad.json", maker)
    rc, out, err = cli("calibrate", "--list", "--json", "--store", root)
    assert rc == 0, err
    listed = json.loads(out)
    assert [c["device"] for c in listed["calibrations"]] == ["Test CPU"]
    [bad] = listed["unreadable"]
    assert bad["file"] == "bad.json" and reason in bad["error"], bad
    rc, out, err = cli("calibrate", "--list", "--store", root)
    assert rc == 0 and err == "", err
    [line] = [ln for ln in out.splitlines() if ln.startswith("unreadable calibration bad.json: ")]
    assert reason in line and "Test CPU" in out, out
    assert raw_controls(out) == []


def test_control_characters_of_a_calibration_are_shown_as_escapes(tmp_path):
    """A calibration's device name, torch version and method are printed by ``calibrate --list``; their control
    characters used to reach the terminal raw."""
    root = tmp_path / "runs"
    make(_calibrations(root) / "c.json", lambda p: p.write_text(json.dumps(ESCAPING_PEAKS)))
    rc, out, err = cli("calibrate", "--list", "--store", root)
    assert rc == 0, err
    assert raw_controls(out) == [] and f"Test CPU {ESCAPED}" in out and f"torch 2.0{ESCAPED}" in out
    assert "GEMM fp32" in out and "GEMM bf16" in out  # the dtypes' lines are all there


def test_lone_surrogates_and_file_names_that_are_not_utf8_print(tmp_path):
    """A lone surrogate in a file's JSON (``"\\ud800"``) or a file name's bytes that are not UTF-8 used to make
    ``calibrate --list`` and ``ls`` die of UnicodeEncodeError: the one shows as U+FFFD, the other as ``\\xNN``."""
    root = tmp_path / "runs"
    folder = _calibrations(root)
    make(folder / "c.json", lambda p: p.write_text(LONE_SURROGATES_PEAKS))
    (folder / os.fsdecode(b"\xff\xfe-bad.json")).write_text("{")
    run = import_tiny(root, "odd")
    (run / "meta.json").write_text(LONE_SURROGATES_META)
    rc, out, err = cli("calibrate", "--list", "--store", root)
    assert rc == 0 and err == "", err
    assert "Test CPU \ufffd  (cpu;" in out and "unreadable calibration \\xff\\xfe-bad.json: " in out, out
    rc, out, err = cli("ls", "--store", root)
    assert rc == 0 and err == "" and f"{run.name} " in out and "ok \ufffd" in out, (out, err)


def test_peaks_file_that_never_ends_or_blocks_is_refused(tmp_path):
    """``analyze --peaks /dev/zero`` used to read until MemoryError, ``--peaks FIFO`` to wait for a writer
    forever: both are refused at once, as what they are (exit 2, one line)."""
    fifo = tmp_path / "peaks.fifo"
    os.mkfifo(fifo)
    for path, reason in [("/dev/zero", "is not a regular file: it is a character device"),
                         (fifo, "is not a regular file: it is a pipe (FIFO)"),
                         (tmp_path, "is not a regular file: it is a directory")]:
        t0 = time.monotonic()
        try:
            rc, _out, err = cli("analyze", CPU_TRACE, "--engine", "sqlite", "--peaks", path, timeout=90,
                               limit_memory=True)
        except subprocess.TimeoutExpired:
            pytest.fail(f"analyze --peaks {path} still ran after 90 s")
        assert rc == 2 and err == f"error: --peaks {path} {reason}\n", (rc, err[-500:])
        assert time.monotonic() - t0 < 60  # it takes a few seconds (imports); reading /dev/zero took minutes


def test_peaks_file_over_the_cap_or_bad_is_refused_with_the_reason(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(3 << 30)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**GOOD_PEAKS, "copy_bytes": 10 ** 400}))
    for path, reason in [(huge, "is over 1 MiB (3,221,225,472 bytes)"),
                         (bad, ": calibration field 'copy_bytes' must be an integer")]:
        rc, _out, err = cli("analyze", CPU_TRACE, "--engine", "sqlite", "--peaks", path, limit_memory=True)
        assert rc == 2 and err.startswith(f"error: --peaks {path}") and reason in err, err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD_PEAKS))
    rc, out, err = cli("analyze", CPU_TRACE, "--engine", "sqlite", "--peaks", good, "--json")
    assert rc == 0, err
    assert json.loads(out)["peaks"]["gemm_tflops"] == GOOD_PEAKS["gemm_tflops"]


# --- the device lock's holder file ---------------------------------------------------------------------------------

@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    d = tmp_path / "locks"
    monkeypatch.setenv("PROFILING_LOCK_DIR", str(d))
    return d


def test_the_lock_holders_text_is_escaped_in_runs_progress_lines(tmp_path, lock_dir):
    """``run`` prints "waiting for device lock ... held by pid N (WHAT)" while another holds the device: WHAT comes
    from the shared lock folder's holder file, and used to reach the terminal raw."""
    from profiling_core.run.lock import device_lock
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROFILING_LOCK_DIR=str(lock_dir))
    with device_lock("cpu", what="run " + ESC):
        p = subprocess.Popen([sys.executable, "-m", "profiling_core", "run", "--device", "cpu", "--size", "8",
                              "--store", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)
        try:
            line, deadline = b"", time.monotonic() + 90
            while b"waiting for device lock" not in line and time.monotonic() < deadline:
                if select.select([p.stdout], [], [], 1)[0]:
                    line = p.stdout.readline()
                    if not line:
                        break
        finally:
            p.kill()
            p.wait()
    text = line.decode()
    assert "waiting for device lock 'cpu' held by pid" in text, (text, p.stderr.read()[-500:])
    assert raw_controls(text) == [] and f"(run {ESCAPED})" in text


@pytest.mark.parametrize("maker,content", [
    (lambda p: os.mkfifo(p), "a FIFO: reading it used to wait for a writer forever"),
    (lambda p: p.write_text("[1, 2]"), "a JSON array: it used to raise AttributeError"),
    (lambda p: p.mkdir(), "a directory"),
    (lambda p: os.symlink("/dev/zero", p), "a link (never followed)"),
    (lambda p: p.write_text(json.dumps({"pid": "x" * 10_000, "what": ["a"]})), "wrong types"),
])
def test_a_hostile_holder_file_still_says_the_device_is_busy(lock_dir, maker, content):
    """The holder file lives in a shared temp folder: whatever is planted there, a waiter that fails fast says the
    device is busy, at once."""
    code = ("from profiling_core.run.lock import device_lock\n"
            "from profiling_core import DeviceBusyError\n"
            "try:\n    device_lock('cpu', wait=False).__enter__()\n"
            "except DeviceBusyError as e:\n    print(e)\n")
    from profiling_core.run.lock import device_lock
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROFILING_LOCK_DIR=str(lock_dir))
    with device_lock("cpu", what="run A"):
        holder = lock_dir / "cpu.holder"
        holder.unlink()
        maker(holder)
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a holder file that is {content} made the waiter hang")
    assert p.returncode == 0 and p.stdout.startswith("device cpu is busy: pid ? (a run) is profiling on it"), \
        (p.stdout, p.stderr[-500:])


# --- property: whatever the folders hold ---------------------------------------------------------------------------

_JSON_ATOMS = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 30, 10 ** 30), st.just(10 ** 400),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                        st.sampled_from([ESC, "\ud800", "bf16", "fp32", "cuda", "cpu", "x" * 300]))
_JSON = st.recursive(_JSON_ATOMS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=8)
_PEAK_FIELDS = sorted(GOOD_PEAKS)
_META_FIELDS = ["name", "status", "source", "started_at", "original_filename", "error", "config", "device",
                "timings", "machine_load"]


@st.composite
def _mangled(draw, base: dict, fields: list[str]):
    """``base`` with some fields replaced by any JSON value, removed, or given a key with control characters."""
    out = dict(base)
    for name in draw(st.lists(st.sampled_from(fields), max_size=4, unique=True)):
        how = draw(st.sampled_from(["value", "remove", "key"]))
        if how == "remove":
            out.pop(name, None)
        elif how == "key":
            out[name] = {ESC + draw(st.sampled_from(["fp32", "bf16", "wall_s"])): draw(_JSON_ATOMS)}
        else:
            out[name] = draw(_JSON)
    return out


def _file(draw, base: dict, fields: list[str]):
    """A maker of one hostile file: a path that is not a readable JSON file, or JSON text of a mangled object."""
    kind = draw(st.sampled_from(["not_readable", "json"]))
    if kind == "not_readable":
        return NOT_READABLE[draw(st.sampled_from(sorted(NOT_READABLE)))][0]
    text = json.dumps(draw(_mangled(base, fields)))
    return lambda p: p.write_text(text)


@st.composite
def _store_contents(draw):
    metas = [_file(draw, {"name": "n", "status": "ok", "source": "import", "config": None}, _META_FIELDS)
             for _ in range(draw(st.integers(1, 3)))]
    peaks = [_file(draw, GOOD_PEAKS, _PEAK_FIELDS) for _ in range(draw(st.integers(1, 3)))]
    return metas, peaks


def _run_cli(args: list[str]) -> tuple[int, str]:
    from profiling_core.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue() + err.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(contents=_store_contents())
def test_whatever_the_store_holds_ls_and_calibrate_list_list_it(contents):
    """Property: for any mix of hostile meta.json and calibration files, ``ls`` and ``calibrate --list`` exit 0,
    list every run and every calibration file (readable, or corrupt with a reason), print no control character, and
    a readable calibration is one whose every figure is a finite positive number and whose every dtype has its median
    and its size."""
    from profiling_core.store import PeakBook, RunStore
    metas, peaks = contents
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        runs = []
        for i, maker in enumerate(metas):
            run = import_tiny(root, f"r{i}")
            (run / "meta.json").unlink()
            maker(run / "meta.json")
            runs.append(run.name)
        for i, maker in enumerate(peaks):
            make(root / ".calibrations" / f"c{i}.json", maker)

        rc, text = _run_cli(["ls", "--store", str(root)])
        assert rc == 0 and raw_controls(text) == [], text
        listed = {r.run_id: r for r in RunStore(root).list()}
        assert set(listed) == set(runs)
        for r in listed.values():
            assert (r.status == "corrupt") == (r.problem is not None)
            if r.problem is not None:
                assert r.problem.startswith("meta.json") and f"{r.run_id} " in text
        rc, text = _run_cli(["ls", "--json", "--store", str(root)])
        assert rc == 0 and {r["run_id"] for r in json.loads(text)} == set(runs)

        rc, text = _run_cli(["calibrate", "--list", "--store", str(root)])
        assert rc == 0 and raw_controls(text) == [], text
        good, bad = PeakBook(root).all()
        assert len(good) + len(bad) == len(peaks)
        for name, why in bad:
            assert f"unreadable calibration {name}: " in text and why
        for p in good:
            numbers = [*p.gemm_tflops.values(), *p.gemm_tflops_median.values(), *p.gemm_sizes.values(),
                       p.bandwidth_gbs, p.bandwidth_gbs_median, p.copy_bytes]
            assert all(isinstance(x, (int, float)) and 0 < x < 1e16 for x in numbers), p
            assert p.gemm_tflops and set(p.gemm_tflops) <= set(p.gemm_tflops_median) & set(p.gemm_sizes)
        rc, text = _run_cli(["calibrate", "--list", "--json", "--store", str(root)])
        assert rc == 0
        doc = json.loads(text)
        assert len(doc["calibrations"]) == len(good) and len(doc["unreadable"]) == len(bad)


def test_every_hostile_file_at_once_through_the_cli(tmp_path):
    """All the hostile kinds in one store, through real processes: both listings exit 0, name every bad file with
    its reason, and the bytes they write hold no control character."""
    root = tmp_path / "runs"
    expected_runs = {}
    for kind, (maker, reason) in NOT_READABLE.items():
        run = import_tiny(root, kind)
        (run / "meta.json").unlink()
        make(run / "meta.json", maker)
        expected_runs[run.name] = reason
    hostile = import_tiny(root, "hostile")
    meta = json.loads((hostile / "meta.json").read_text())
    (hostile / "meta.json").write_text(json.dumps({**meta, "status": "ok" + ESC, "started_at": ESC}))
    for kind, (maker, _) in {**NOT_READABLE, **BAD_PEAKS}.items():
        make(_calibrations(root) / f"{kind}.json", maker)
    make(_calibrations(root) / "escaping.json", lambda p: p.write_text(json.dumps(ESCAPING_PEAKS)))
    rc, out, err = cli("ls", "--store", root)
    assert rc == 0 and err == "" and raw_controls(out) == [], err
    for rid, reason in expected_runs.items():
        assert any(ln.startswith(rid) and "corrupt" in ln and reason in ln for ln in out.splitlines()), rid
    assert any(ln.startswith(hostile.name) and f"ok{ESCAPED}" in ln for ln in out.splitlines())
    rc, out, err = cli("calibrate", "--list", "--store", root)
    assert rc == 0 and err == "" and raw_controls(out) == [], err
    for kind, (_, reason) in {**NOT_READABLE, **BAD_PEAKS}.items():
        assert any(ln.startswith(f"unreadable calibration {kind}.json: ") and reason in ln
                   for ln in out.splitlines()), kind
    assert f"Test CPU {ESCAPED}" in out


def test_import_of_a_file_name_that_is_not_utf8_prints_json_a_strict_reader_takes(tmp_path):
    """``import --json`` of ``bad\\xff.json`` printed the name with a lone surrogate (``"bad\\udcff.json"``): JSON
    text, but no Unicode, which a strict reader refuses; ``ls`` then showed the same run as ``bad\\ufffd.json``.
    The name is kept as it reads back."""
    src = tmp_path / os.fsdecode(b"bad\xff.json")
    src.write_bytes(CPU_TRACE.read_bytes())
    rc, out, err = cli("import", src, "--json", "--store", tmp_path / "runs")
    assert rc == 0, err
    assert "\\ud" not in out.lower()  # no surrogate escape in the JSON text
    got = json.loads(out)
    assert got["name"] == "bad\ufffd.json"
    rc, out, _err = cli("ls", "--json", "--store", tmp_path / "runs")
    assert [r["name"] for r in json.loads(out)] == [got["name"]]

"""Run store: atomic writes, listing, loading, deleting, importing, and refusal of ids that escape the root."""
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from conftest import DATA
from profiling_core import (InvalidRunIdError, RunNotFoundError, RunStore, RunStoreError, TraceFormatError,
                            TraceTooLargeError)
from profiling_core.store.runs import RUN_FILES, validate_run_id

H200 = DATA / "h200" / "64_bf16_cold_eager.json"


TINY = '{"traceEvents": []}'  # the smallest readable trace


def make_run(store, name="x"):
    """A run made through the public door: importing a tiny trace (no events) under ``name``."""
    tiny = store.root.parent / "tiny.json"
    tiny.write_text(TINY)
    return store.import_trace(tiny, name=name)


def staging_folders(store) -> list[Path]:
    """Runs being written (the store's documented ``.staging/`` folder)."""
    staging = store.root / ".staging"
    return sorted(staging.iterdir()) if staging.is_dir() else []


@pytest.mark.parametrize("bad", ["..", "../etc", "a/b", "/etc/passwd", ".staging", ".trash", "", "a\\b",
                                 "x" * 161, "run id", "..hidden", "a..b", None, 5, "-start", "abc\n", "abc\r"])
def test_run_ids_that_could_escape_are_refused(store, bad):
    with pytest.raises(InvalidRunIdError, match="run id must be"):
        store.load(bad)
    with pytest.raises(InvalidRunIdError):
        store.delete(bad)


def test_valid_ids_pass():
    assert validate_run_id("20261129-120000-64_bf16_cold_eager-ab12") == "20261129-120000-64_bf16_cold_eager-ab12"


def test_a_run_becomes_visible_only_when_complete(store, monkeypatch):
    seen_while_copying = {}
    copy = shutil.copyfileobj

    def watching_copy(src, dst, *args):
        out = copy(src, dst, *args)
        seen_while_copying.update(listed=store.list(), staging=staging_folders(store))
        return out

    monkeypatch.setattr(shutil, "copyfileobj", watching_copy)
    run = store.import_trace(H200, name="n")
    assert seen_while_copying["listed"] == []  # a staging folder is never listed
    assert len(seen_while_copying["staging"]) == 1 and not seen_while_copying["staging"][0].exists()
    assert staging_folders(store) == [] and run.run_dir.is_dir()
    assert json.loads((run.run_dir / "meta.json").read_text())["run_id"] == run.run_id
    assert [r.run_id for r in store.list()] == [run.run_id]


def test_write_error_while_saving_keeps_only_complete_runs(store, monkeypatch):
    first = make_run(store, "a")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", disk_full)
    with pytest.raises(RunStoreError, match="could not save run .*No space left on device"):
        store.import_trace(H200, name="b")
    monkeypatch.undo()
    assert [r.run_id for r in store.list()] == [first.run_id]
    assert staging_folders(store) == []
    assert (first.run_dir / "trace.json").read_text() == TINY


def test_import_run_lands_another_stores_run_whole(store, tmp_path):
    """A run made in another store (a cluster node's) arrives as bytes and lands as every run does."""
    files = {"trace.json": TINY.encode(), "table.txt": b"the table", "memory_categories.json": b"{}"}
    run = store.import_run(files, {"name": "remote", "status": "ok", "run_id": "its-id-there", "node": {"pid": 7}})
    assert sorted(p.name for p in run.run_dir.iterdir()) == ["memory_categories.json", "meta.json", "table.txt",
                                                               "trace.json"]
    meta = json.loads((run.run_dir / "meta.json").read_text())
    assert meta["run_id"] == run.run_id != "its-id-there" and meta["node"] == {"pid": 7}
    assert (run.run_dir / "trace.json").read_text() == TINY and staging_folders(store) == []


@pytest.mark.parametrize("files, match", [
    ({"trace.json": b"{}", "../escape": b"x"}, r"got '\.\./escape'"),
    ({"trace.json": b"{}", "meta.json": b"{}"}, r"got 'meta.json'"),
    ({"table.txt": b"t"}, "a run has one trace"),
    ({"trace.json": b"{}", "trace.json.gz": b"x"}, "a run has one trace"),
    ({"trace.json": "text, not bytes"}, "trace.json must be bytes, got str"),
])
def test_import_run_refuses_what_is_not_a_run_and_keeps_nothing(store, files, match):
    with pytest.raises(RunStoreError, match=match):
        store.import_run(files, {"name": "bad"})
    assert store.list() == [] and staging_folders(store) == []
    assert not (store.root.parent / "escape").exists()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hst.text(min_size=0, max_size=40).filter(lambda n: n not in RUN_FILES))
def test_import_run_refuses_any_other_file_name(store, name):
    """Whatever a name is (a path, a dot file, control characters, meta.json), only the run's own files land."""
    with pytest.raises(RunStoreError, match="a run's files are named"):
        store.import_run({"trace.json": TINY.encode(), name: b"x"}, {"name": "n"})
    assert store.list() == [] and staging_folders(store) == []
    assert [p.name for p in store.root.glob("*")] in ([], [".staging"])  # nothing else under the root


def test_a_write_error_in_import_run_keeps_nothing(store, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", disk_full)
    with pytest.raises(RunStoreError, match="No space left on device"):
        store.import_run({"trace.json": TINY.encode(), "table.txt": b"t"}, {"name": "b"})
    monkeypatch.undo()
    assert store.list() == [] and staging_folders(store) == []


def test_list_newest_first_load_and_delete(store):
    a, b = make_run(store, "2026-01-01"), make_run(store, "2026-02-01")
    assert [r.run_id for r in store.list()] == [b.run_id, a.run_id]
    assert store.load(a.run_id).meta["name"] == "2026-01-01"
    store.delete(a.run_id)
    assert [r.run_id for r in store.list()] == [b.run_id]
    with pytest.raises(RunNotFoundError, match="no run"):
        store.load(a.run_id)
    with pytest.raises(RunNotFoundError):
        store.delete(a.run_id)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("content,reason", [
    ("{not json", "meta.json is not valid JSON"),
    ("", "meta.json is empty"),
    (None, "meta.json is missing"),
    (b'{"name": "\xff"}', "meta.json is not valid JSON"),  # not UTF-8
    ('{"name": ' + DEEP + "}", "meta.json nests too deeply"),
    (DEEP, "meta.json nests too deeply"),
    ('{"a": ' * 40 + "1" + "}" * 40, "meta.json nests more than 32 levels deep"),
    ("[1, 2]", "meta.json must hold a JSON object, got an array"),
    ('"ok"', "meta.json must hold a JSON object, got a string"),
    ('{"name": "n", "status": "ok", "device": "str"}', "Expected `object | null`, got `str` - at `$.device`"),
    ('{"name": "n", "status": ["x"]}', "Expected `str`, got `array` - at `$.status`"),
    ('{"name": 5}', "Expected `str`, got `int` - at `$.name`"),
    ('{"started_at": {"a": 1}}', "Expected `str`, got `object` - at `$.started_at`"),
    ('{"source": null}', "Expected `str`, got `null` - at `$.source`"),
    ('{"config": {"size": "big"}}', "Expected `int | null`, got `str` - at `$.config.size`"),
    ('{"config": {"warmup": true}}', "Expected `int | null`, got `bool` - at `$.config.warmup`"),
    ('{"device": {"name": ["x"]}}', "Expected `str | null`, got `array` - at `$.device.name`"),
    ('{"timings": {"wall_s": "1 s"}}', "Expected `float | null`, got `str` - at `$.timings.wall_s`"),
    ('{"timings": {"warmup_s": "1.5 s"}}', "Expected `float | null`, got `str` - at `$.timings.warmup_s`"),
    ('{"machine_load": [1]}', "Expected `object | null`, got `array` - at `$.machine_load`"),
], ids=["not-json", "empty", "missing", "not-utf8", "deep-field", "deep-top", "40-levels", "array", "string",
        "device-str", "status-list", "name-int", "started_at-object", "source-null", "config-size-str", "config-warmup-bool",
        "device-name-list", "wall_s-str", "warmup_s-str", "machine_load-list"])
def test_a_bad_meta_json_is_listed_as_corrupt_with_the_reason(store, content, reason):
    good, run = make_run(store, "good"), make_run(store, "bad")
    meta = run.run_dir / "meta.json"
    if content is None:
        meta.unlink()
    else:
        meta.write_bytes(content if isinstance(content, bytes) else content.encode())
    listed = {r.run_id: r for r in store.list()}
    assert set(listed) == {good.run_id, run.run_id}
    assert listed[good.run_id].status == "ok" and listed[good.run_id].problem is None
    bad = listed[run.run_id]
    assert bad.status == "corrupt" and reason in bad.problem, bad.problem
    assert bad.meta == {"name": run.run_id, "status": "corrupt", "error": bad.problem}  # nothing of the bad file
    assert bad.name == run.run_id and bad.config is None
    assert bad.to_dict()["error"] == bad.problem
    assert store.load(run.run_id).problem == bad.problem
    store.delete(run.run_id)
    assert [r.run_id for r in store.list()] == [good.run_id]


def test_a_huge_meta_json_is_not_read_whole(store):
    run = make_run(store)
    (run.run_dir / "meta.json").write_bytes(b'{"name": "' + b"x" * (2 * 2**20) + b'"}')
    [listed] = store.list()
    assert listed.status == "corrupt" and "meta.json is over 1 MiB" in listed.problem


def test_a_meta_json_that_is_not_a_file_does_not_hang_the_listing(store):
    run = make_run(store)
    (run.run_dir / "meta.json").unlink()
    os.mkfifo(run.run_dir / "meta.json")  # reading it would wait for a writer forever
    [listed] = store.list()
    assert listed.status == "corrupt" and "meta.json is not a regular file" in listed.problem


def test_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFILING_RUNS_DIR", str(tmp_path / "elsewhere"))
    assert RunStore().root == tmp_path / "elsewhere"


def test_import_json_and_gzip_traces(store, tmp_path):
    run = store.import_trace(H200)
    assert run.trace_path.read_bytes() == H200.read_bytes()
    assert run.meta["source"] == "import" and run.config is None
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(H200.read_bytes()))
    run2 = store.import_trace(gz, name="zipped")
    assert run2.trace_path.name == "trace.json.gz"
    assert gzip.decompress(run2.trace_path.read_bytes()) == H200.read_bytes()


CPU = (DATA / "cpu" / "64_fp32_warm_eager.json").read_bytes()


@pytest.mark.parametrize("content,error,match", [
    (b"hello world", TraceFormatError, "bad.json is not valid JSON"),
    (b"\x1f\x8b garbage", TraceFormatError, "bad.json is not a valid gzip file"),
    (CPU[: len(CPU) // 2], TraceFormatError, "bad.json is not valid JSON: Input data was truncated"),
    (b"{}", TraceFormatError, "bad.json is a JSON object without a 'traceEvents' list"),
    (b'{"traceEvents": NaN}', TraceFormatError, "bad.json is not valid JSON"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1, "pid": 1, "tid": 1}]}', TraceFormatError,
     "bad.json is not valid JSON"),
    (b'{"traceEvents": [{"ph": "?"}]}', TraceFormatError, "none of its 1 events could be used"),
    (b"\xff\xfe" + '{"traceEvents": []}'.encode("utf-16-le"), TraceFormatError, "bad.json is not valid JSON"),
], ids=["text", "gzip-garbage", "truncated", "empty-object", "nan-list", "nan-ts", "no-usable-event", "utf-16"])
def test_import_refuses_what_the_loader_refuses_and_keeps_nothing(store, tmp_path, content, error, match):
    from profiling_core import open_trace
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(error) as loader:
        open_trace(p, engine="sqlite")
    with pytest.raises(error, match=match) as imported:
        store.import_trace(p)
    assert str(imported.value) == str(loader.value)  # the loader's own words
    assert store.list() == [] and staging_folders(store) == []


@pytest.mark.parametrize("gz", [False, True])
def test_a_utf8_byte_order_mark_is_accepted_by_import_and_the_loader(store, tmp_path, gz):
    from profiling_core import open_trace
    data = b"\xef\xbb\xbf" + CPU
    p = tmp_path / ("bom.json.gz" if gz else "bom.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    run = store.import_trace(p)
    with open_trace(run.trace_path, engine="sqlite") as with_bom, \
            open_trace(DATA / "cpu" / "64_fp32_warm_eager.json", engine="sqlite") as without:
        assert with_bom.load_stats == without.load_stats
        q = "SELECT name, ts, dur FROM slice ORDER BY id"
        assert with_bom.query(q).equals(without.query(q))


def test_a_refused_import_names_the_file_as_the_user_knows_it(store, tmp_path):
    p = tmp_path / "upload"
    p.write_bytes(b"{}")
    with pytest.raises(TraceFormatError, match=r"^my trace\.json is a JSON object without a 'traceEvents' list"):
        store.import_trace(p, name="my trace", filename="my trace.json")
    p.write_bytes(CPU)
    run = store.import_trace(p, name="my trace", filename="my trace.json")
    assert run.meta["original_filename"] == "my trace.json" and run.name == "my trace"


@pytest.mark.parametrize("file_name,name", [("resnet50..bf16.json", None), ("sweep_1..4.json", None),
                                            ("trace...json", None), ("t.json", "a/..b"), ("t.json", "v1..v2")])
def test_a_name_with_two_dots_in_a_row_imports(store, tmp_path, file_name, name):
    """A trace file named ``resnet50..bf16.json`` (or a run named ``v1..v2``) could not be imported: its run id kept
    the '..' that the store's own id check refuses, and the error spoke of run ids the user never typed. The trace
    lands as the file was, under an id the store opens again."""
    p = tmp_path / file_name
    p.write_bytes(H200.read_bytes())
    run = store.import_trace(p, name=name)
    assert ".." not in run.run_id
    assert store.load(run.run_id).trace_path.read_bytes() == H200.read_bytes()


def test_import_size_cap(store, tmp_path):
    p = tmp_path / "big.json"
    p.write_bytes(b"[" + b" " * 2048 + b"]")
    with pytest.raises(TraceTooLargeError, match="over the cap of"):
        store.import_trace(p, max_bytes=1024)
    gz = tmp_path / "big.json.gz"
    gz.write_bytes(gzip.compress(b"[" + b" " * 2048 + b"]"))  # small on disk, over the cap once decompressed
    with pytest.raises(TraceTooLargeError, match="decompresses to more than"):
        store.import_trace(gz, max_bytes=1024)
    assert store.list() == []


def test_stale_staging_is_cleaned(store):
    staging = store.root / ".staging" / "stale"  # what a process killed mid-run leaves behind
    staging.mkdir(parents=True)
    os.utime(staging, (0, 0))
    assert store.cleanup_staging(older_than_s=60) == 1
    assert not staging.exists()


def test_staging_of_a_killed_writer_is_removed_on_the_next_open(tmp_path):
    """A process killed while writing a run leaves its staging folder; the next open of the store removes it once
    the writer is provably gone (its owner lock is free), never while it lives."""
    import subprocess
    import sys
    root = tmp_path / "runs"
    code = ("import sys, time\nfrom profiling_core import RunStore\n"
            "run_id, staging = RunStore(sys.argv[1])._begin('doomed')\nprint(staging, flush=True)\ntime.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        staging = Path(writer.stdout.readline().strip())
        assert staging_folders(RunStore(root)) == [staging]  # opened while its writer lives: kept
    finally:
        writer.kill()
        writer.wait()
    assert staging_folders(RunStore(root)) == []


def test_an_imported_trace_lands_as_the_loader_checked_it(store, tmp_path, monkeypatch):
    """The source is read once: a file replaced right after the loader's check cannot put other bytes in the store."""
    import profiling_core.trace as trace_mod
    src = tmp_path / "mine.json"
    good = H200.read_bytes()
    src.write_bytes(good)
    real = trace_mod.open_trace

    def check_then_swap(path, *args, **kwargs):
        session = real(path, *args, **kwargs)
        src.write_bytes(b'{"traceEvents": [')  # replaced the moment the check has read it
        return session

    monkeypatch.setattr(trace_mod, "open_trace", check_then_swap)
    run = store.import_trace(src, name="n")
    assert run.trace_path.read_bytes() == good
    assert run.meta["size_bytes"] == len(good)


def test_an_import_of_an_endless_source_stops_at_the_cap_and_keeps_nothing(tmp_path):
    """A device with no size (/dev/zero): the import checked the cap against fstat's 0 and copied without end (1.4 GB
    in 3 s, until the disk filled). It stops at the cap, says so, and leaves nothing in the store."""
    import os

    from profiling_core.errors import TraceTooLargeError
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    store = RunStore(tmp_path / "runs")
    with pytest.raises(TraceTooLargeError, match=r"gave more than 8\.0 MiB \(the import cap, 8388608 bytes\)"):
        store.import_trace("/dev/zero", max_bytes=8 << 20)
    assert store.list() == []
    left = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()] if (tmp_path / "runs").exists() else []
    assert sum(p.stat().st_size for p in left) < 1 << 20

"""AppTest: Trace lab (upload → store → analyses; read-only SQL console)."""
from __future__ import annotations

import pytest

from profiling_core.present import md_code, md_text

from conftest_app import CPU_TRACE, H200, app, download, errors_of


def upload(at, name: str, content: bytes):
    at.get("file_uploader")[0].set_value((name, content, "application/json"))
    return at.run()


def test_upload_then_query(runs_dir, media):
    at = app("trace_lab")
    assert not errors_of(at)
    upload(at, "4096_bf16_warm_eager.json", (H200 / "4096_bf16_warm_eager.json").read_bytes())
    assert not errors_of(at), errors_of(at)
    assert any("Imported as run" in s.value for s in at.success)
    assert len([p for p in runs_dir.iterdir() if not p.name.startswith(".")]) == 1
    assert download(at, media, "png_lab_kernels")[:4] == b"\x89PNG"
    at.text_area(key="lab_sql").set_value("SELECT name, dur FROM slice WHERE category = 'kernel' ORDER BY dur DESC")
    [go] = [b for b in at.button if b.label == "Run query"]
    go.click().run()
    assert not errors_of(at)
    result = at.dataframe[-1].value
    assert list(result.columns) == ["name", "dur"] and len(result) == 6
    assert download(at, media, "csv_lab_result").startswith(b"name,dur")


def test_example_queries_and_clean_sql_errors(runs_dir):
    at = app("trace_lab")
    upload(at, "cpu.json", CPU_TRACE.read_bytes())
    at.selectbox(key="lab_example").set_value("steps").run()
    assert "ProfilerStep" in at.text_area(key="lab_sql").value
    for bad in ("SELEC nonsense", "DELETE FROM slice", "SELECT fts3_tokenizer('simple')"):
        at.text_area(key="lab_sql").set_value(bad)
        [go] = [b for b in at.button if b.label == "Run query"]
        go.click().run()
        assert not at.exception
        assert any("Query failed" in e.value for e in at.error)
    at.text_area(key="lab_sql").set_value(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 150000) SELECT x FROM n")
    [go] = [b for b in at.button if b.label == "Run query"]
    go.click().run()
    assert not errors_of(at)
    assert any("cut at 100,000 rows" in w.value for w in at.warning)
    assert len(at.dataframe[-1].value) == 100_000


def stored_runs(runs_dir) -> list[str]:
    return sorted(p.name for p in runs_dir.iterdir() if not p.name.startswith(".")) if runs_dir.exists() else []


CPU = CPU_TRACE.read_bytes()


@pytest.mark.parametrize("content,reason", [
    (b"this is not json", "broken.json is not valid JSON"),
    (CPU[: len(CPU) // 2], "broken.json is not valid JSON: Input data was truncated"),
    (b"{}", "broken.json is a JSON object without a 'traceEvents' list"),
    (b'{"traceEvents": NaN}', "broken.json is not valid JSON"),
], ids=["text", "truncated", "empty-object", "nan"])
def test_a_broken_upload_is_refused_once_and_kept_nowhere(runs_dir, content, reason):
    at = app("trace_lab")
    upload(at, "broken.json", content)
    shown = [e.value for e in at.error]
    for _ in range(4):
        at.run()
        shown += [e.value for e in at.error]
    assert not at.exception, [e.value for e in at.exception]
    assert stored_runs(runs_dir) == []
    # the message quotes the file's name, so it is shown escaped (md_text)
    assert len(shown) == 1 and shown[0].startswith(f"**Could not import {md_text('broken.json')}**: ") \
        and md_text(reason) in shown[0], shown
    assert "/tmp" not in shown[0]  # named as the user knows it, not by the upload's temporary file


def test_an_upload_is_imported_once(runs_dir):
    at = app("trace_lab")
    upload(at, "cpu.json", CPU)
    for _ in range(4):
        at.run()
    assert not errors_of(at)
    assert len(stored_runs(runs_dir)) == 1


def test_a_long_non_ascii_file_name_imports(runs_dir):
    name = "性能分析" * 23 + "轨.json"  # 93 CJK characters: 279 bytes of UTF-8, over a file name's 255
    at = app("trace_lab")
    upload(at, name, CPU)
    assert not errors_of(at), errors_of(at)
    [rid] = stored_runs(runs_dir)
    from profiling_core import RunStore
    run = RunStore(runs_dir).load(rid)
    assert run.meta["original_filename"] == name and run.name == name.removesuffix(".json")
    assert run.status == "ok" and len(rid.encode()) <= 160


def test_a_cpu_trace_shows_no_gpu_columns(runs_dir):
    at = app("trace_lab")
    upload(at, "cpu.json", CPU_TRACE.read_bytes())
    assert not errors_of(at), errors_of(at)
    steps = at.dataframe[0].value
    assert list(steps.columns) == ["step", "cpu_dur_us"]  # no GPU busy time, launches or kernels to show
    assert [m.value for m in at.metric if m.label == "GPU ops (a CPU trace)"] == ["none"]


def test_a_trace_of_two_gpus_in_one_process_says_what_its_gpu_figures_count(runs_dir, tmp_path):
    import verdict_traces as vt
    at = app("trace_lab")
    upload(at, "pipeline.json", vt.two_gpu_pipeline(tmp_path / "t.json").read_bytes())
    assert not errors_of(at), errors_of(at)
    [note] = [c.value for c in at.caption if "GPUs of this process" in c.value]
    assert all(md_text(x) in note for x in ("ran on 2 GPUs", "device 0 4.00 ms launched", "device 1 4.00 ms launched"))
    one = app("trace_lab")
    upload(one, "one.json", (H200 / "4096_bf16_warm_eager.json").read_bytes())
    assert not [c.value for c in one.caption if "GPUs of this process" in c.value]


def test_a_file_of_merged_ranks_says_under_the_metrics_that_its_figures_mix_them(runs_dir, tmp_path):
    """Two ranks' copies of the study's cold 64² trace in one file (each under its own pids): the page says so where
    the per-step figures are read, naming the processes that hold step slices (a plain scan), and names the GPUs as
    those of these processes; one rank's own trace says neither."""
    import json
    from conftest import scan_trace
    doc = json.loads((H200 / "64_bf16_cold_eager.json").read_text())
    events = [{**e, "pid": e["pid"] + 1_000_000 * k} if isinstance(e.get("pid"), int) else e
              for k in range(2) for e in doc["traceEvents"]]
    path = tmp_path / "merged.json"
    path.write_text(json.dumps({**doc, "traceEvents": events}))
    pids = sorted({e["pid"] for e in scan_trace(path) if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") != "gpu_user_annotation"})
    at = app("trace_lab")
    upload(at, "merged.json", path.read_bytes())
    assert not errors_of(at), errors_of(at)
    [note] = [w.value for w in at.warning if "processes" in w.value]
    assert md_text(f"This trace holds the steps of 2 processes (pid {pids[0]}, {pids[1]})") in note
    assert any(md_text("2 GPUs of these 2 processes") in c.value for c in at.caption)
    one = app("trace_lab")
    upload(one, "one.json", (H200 / "64_bf16_cold_eager.json").read_bytes())
    assert not [w.value for w in one.warning if "processes" in w.value]


def test_the_steps_table_shows_both_busy_figures_its_share_is_made_of(runs_dir):
    """TraceLens' Qwen trace: its one step's window holds 13.48 ms of GPU work queued before the recording began, so
    the GPU work the step launched (31.91 ms) is not what its busy share (0.918 of 47.15 ms) divides: the table shows
    the window's busy time beside it (a plain scan of the JSON: the union of every GPU op clipped to the window)."""
    from conftest import scan_trace
    from test_analyses import _union
    path = H200.parent / "traces" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    [step] = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    b, e = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    busy = _union([(max(float(x["ts"]), b), min(float(x["ts"]) + float(x["dur"]), e)) for x in ev
                   if x.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and float(x["ts"]) < e and float(x["ts"]) + float(x["dur"]) > b])
    at = app("trace_lab")
    upload(at, path.name, path.read_bytes())
    assert not errors_of(at), errors_of(at)
    row = at.dataframe[0].value.iloc[0]
    assert row["gpu_busy_in_step_us"] == pytest.approx(busy, abs=0.01)
    assert row["gpu_busy_fraction"] == pytest.approx(row["gpu_busy_in_step_us"] / row["cpu_dur_us"], abs=1e-6)
    # the step's own GPU work (0.677 of the window) is not what the share (0.918) divides
    assert row["gpu_busy_us"] / row["cpu_dur_us"] < row["gpu_busy_fraction"] - 0.2


def test_a_step_cut_at_the_end_of_the_recording_is_said_under_the_metrics(runs_dir):
    """HTA's Triton example: ProfilerStep#1 is written 13,336.32 ms long, past the profiler's own Trace slice, which
    ends 1.67 ms after the step began: the page says the step is cut there (a plain scan gives both ends)."""
    from conftest import scan_trace
    path = H200.parent / "traces" / "triton_example.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    [step] = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    [rec] = [e for e in ev if e.get("cat") == "Trace"]  # the profiler's own slice: "PyTorch Profiler (0)"
    cut_ms = (float(step["ts"]) + float(step["dur"]) - float(rec["ts"]) - float(rec["dur"])) / 1000
    assert cut_ms > 13000
    at = app("trace_lab")
    upload(at, path.name, path.read_bytes())
    assert not errors_of(at), errors_of(at)
    [note] = [c.value for c in at.caption if "outlasts the recording" in c.value]
    assert md_text(f"ProfilerStep#1's by {cut_ms:.2f} ms") in note, note
    clean = app("trace_lab")
    upload(clean, "one.json", (H200 / "4096_bf16_warm_eager.json").read_bytes())
    assert not [c.value for c in clean.caption if "outlasts the recording" in c.value]


@pytest.mark.parametrize("sql,columns,first", [
    ("SELECT s.name, t.name FROM slice s JOIN thread_track t ON s.track_id = t.id ORDER BY s.id LIMIT 2",
     ["name", "name:1"], None),
    ("SELECT x'00ff' AS b UNION ALL SELECT 1", ["b"], "X'00FF'")])
def test_a_join_s_repeated_names_and_mixed_blobs_show_as_a_table(runs_dir, sql, columns, first):
    """A join that selects two tables' ``name`` columns (or ``SELECT *`` of a join) and a column mixing a blob with a
    number raised tracebacks in the page (Streamlit refuses repeated column names, and Arrow a column of bytes beside
    numbers): the names are made unique as trace_processor makes them, and such blobs show as SQL writes them."""
    at = app("trace_lab")
    upload(at, "cpu.json", CPU_TRACE.read_bytes())
    at.text_area(key="lab_sql").set_value(sql)
    [go] = [b for b in at.button if b.label == "Run query"]
    go.click().run()
    assert not at.exception and not errors_of(at)
    result = at.dataframe[-1].value
    assert list(result.columns) == columns
    if first is not None:
        assert result.iloc[0, 0] == first


def test_a_rank_of_merged_ranks_is_imported_as_a_run_of_its_own(runs_dir, tmp_path):
    """Two ranks' traces merged into one file (the H200's warm 4096² run and a copy 7 µs later): the page says that
    its per-step figures mix them and offers each rank (a plain scan: the pids that hold step slices, and the GPU
    lanes of their kernels); importing the second makes a new run holding that rank's steps only, and the merged run
    stays."""
    import json

    import verdict_traces as vt
    from conftest import scan_trace
    from profiling_core import analyze, open_trace
    one = vt.as_ranks(H200 / "4096_bf16_warm_eager.json", tmp_path / "one.json", ranks=1)
    two = vt.as_ranks(one, tmp_path / "two.json")
    ev = scan_trace(two)
    pids = sorted({e["pid"] for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
                   and e.get("cat") != "gpu_user_annotation"})
    gpus = sorted({e["pid"] for e in ev if e.get("cat") == "kernel"})
    at = app("trace_lab")
    upload(at, "two ranks.json", two.read_bytes())
    assert not errors_of(at), errors_of(at)
    assert any("holds the steps of 2 processes" in w.value for w in at.warning)
    pick = at.selectbox[[s.label for s in at.selectbox].index(
        "Read one rank on its own: the process that holds its steps")]
    steps = [sum(1 for e in ev if e.get("pid") == p and str(e.get("name", "")).startswith("ProfilerStep#")
                 and e.get("ph") == "X") for p in pids]
    assert pick.options == [f"pid {p}: {n} step slices, GPU lane {g}" for p, n, g in zip(pids, steps, gpus)]
    pick.set_value(1)
    [go] = [b for b in at.button if b.label == "Import this rank as a run"]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    runs = stored_runs(runs_dir)
    assert len(runs) == 2
    new = next(r for r in runs if (runs_dir / r / "meta.json").exists()
               and json.loads((runs_dir / r / "meta.json").read_text())["name"] == f"two ranks pid {pids[1]}")
    assert [s.value for s in at.success] == [f"Pid {md_code(str(pids[1]), 60)}'s rank imported as run "
                                             f"{md_code(new, 200)}; it is now the current run of every page."]
    assert not any("stay for every rank" in w.value for w in at.warning)  # (each rank's profiler events placed)
    trace = next((runs_dir / new).glob("trace.json*"))
    with open_trace(trace, engine="sqlite") as s:
        assert analyze(s).summary["step_processes"] == [pids[1]]
    assert {e["pid"] for e in scan_trace(trace) if e.get("cat") == "kernel"} == {gpus[1]}


def test_a_rank_of_interleaved_ranks_is_imported_with_what_it_keeps_of_the_others(runs_dir, tmp_path):
    """Two ranks whose events interleave in the file (tests/test_ranks.py): no place says whose the profiler's own
    events are, so the imported rank keeps every rank's (a plain scan: both recording spans), and the page says so
    beside the import's success."""
    import json

    from conftest import scan_trace
    from test_ranks import _a20_ranks
    from profiling_core.explain import UNPLACED_EVENTS_TEXT
    path, _own = _a20_ranks(tmp_path, interleave=True)
    at = app("trace_lab")
    upload(at, "interleaved.json", path.read_bytes())
    assert not errors_of(at), errors_of(at)
    [go] = [b for b in at.button if b.label == "Import this rank as a run"]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    assert len(at.success) == 1 and UNPLACED_EVENTS_TEXT in [w.value for w in at.warning]
    [new] = [r for r in stored_runs(runs_dir) if (runs_dir / r / "meta.json").exists()
             and json.loads((runs_dir / r / "meta.json").read_text())["name"].startswith("interleaved pid ")]
    trace = next((runs_dir / new).glob("trace.json*"))
    assert sum(1 for e in scan_trace(trace) if e.get("pid") == "Spans" and e.get("ph") == "X") == 2


def test_ranks_that_share_a_gpu_lane_are_not_offered(runs_dir):
    """Two ranks whose GPU ops share one lane (two nodes' device 0 merged into one file): the page says why its
    ranks cannot be read on their own (``analyses.unparted``, tests/test_ranks.py) and offers none."""
    import tempfile
    from pathlib import Path

    from test_ranks import _shared_lane
    with tempfile.TemporaryDirectory() as tmp:
        data = _shared_lane(Path(tmp)).read_bytes()
    at = app("trace_lab")
    upload(at, "shared lane.json", data)
    assert not errors_of(at), errors_of(at)
    assert any("holds the steps of 2 processes" in w.value for w in at.warning)
    assert any(c.value.startswith("Its ranks cannot be read on their own: process 100445 launches GPU work but no GPU "
                                  "lane holds its ops apart") for c in at.caption), [c.value for c in at.caption]
    assert "Import this rank as a run" not in [b.label for b in at.button]


def test_the_upload_says_the_trace_cap_and_refuses_past_it(runs_dir, monkeypatch):
    """The uploader names the loader's cap (512 MiB, or what PROFILING_MAX_TRACE_MIB sets), a trace past it is
    refused with the variable named and nothing kept, and a bad value is said, not raised."""
    at = app("trace_lab")
    assert "read up to 512 MiB once decompressed" in at.get("file_uploader")[0].proto.label
    monkeypatch.setenv("PROFILING_MAX_TRACE_MIB", "1")
    at = app("trace_lab")
    assert "read up to 1 MiB once decompressed (`PROFILING_MAX_TRACE_MIB` sets it)" in \
        at.get("file_uploader")[0].proto.label
    big = CPU[:-1] + b" " * (3 << 19) + CPU[-1:]  # (the CPU trace, padded past 1.5 MiB)
    upload(at, "big.json", big)
    assert any(md_text("big.json is 1.5 MiB (1583482 bytes), over the cap of 1.0 MiB (1048576 bytes); set "
                       "PROFILING_MAX_TRACE_MIB (MiB)") in e.value for e in at.error), [e.value for e in at.error]
    assert stored_runs(runs_dir) == []
    monkeypatch.setenv("PROFILING_MAX_TRACE_MIB", "one")
    at = app("trace_lab")
    assert not at.exception
    assert any(md_text("PROFILING_MAX_TRACE_MIB must be a whole number of MiB from 1 to 1048576 (unset: 512), got "
                       "'one'") in e.value for e in at.error), [e.value for e in at.error]

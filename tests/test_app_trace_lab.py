"""AppTest: Trace lab (upload → store → analyses; read-only SQL console)."""
from __future__ import annotations

import pytest

from profiling_core.present import md_text

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
    assert [m.value for m in at.metric if m.label == "GPU ops"] == ["none (CPU trace)"]


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

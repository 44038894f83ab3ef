"""AppTest: Trace lab (upload → store → analyses; read-only SQL console)."""
from __future__ import annotations

from conftest_app import CPU_TRACE, H200, app, download, errors_of, media, runs_dir  # noqa: F401


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


def test_a_broken_upload_is_refused_cleanly(runs_dir):
    at = app("trace_lab")
    upload(at, "broken.json", b"this is not json")
    assert not at.exception
    assert any("Could not import" in e.value for e in at.error)
    assert not [p for p in runs_dir.iterdir() if not p.name.startswith(".")] if runs_dir.exists() else True

"""The perfetto engine against the same goldens (needs $PERFETTO_BIN), and auto mode's fast fallback."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from profiling_core.errors import EngineUnavailableError
from profiling_core.trace import open_trace

from test_trace_golden import QUERIES, TRACES, as_text, golden_rows, trace_path

DATA = Path(__file__).parent / "data" / "traces"
BIN = os.environ.get("PERFETTO_BIN")
needs_bin = pytest.mark.skipif(not (BIN and os.path.isfile(BIN)),
                               reason="set PERFETTO_BIN to a trace_processor_shell binary to run these")


@needs_bin
@pytest.mark.perfetto
@pytest.mark.parametrize("trace", TRACES)
def test_perfetto_matches_goldens(trace):
    with open_trace(trace_path(trace), engine="perfetto", perfetto_bin=BIN) as s:
        assert s.engine == "perfetto"
        for query, sql in QUERIES.items():
            header, expected = golden_rows(trace, query)
            df = s.query(sql)
            assert list(df.columns) == header, query
            got = [[as_text(v) for v in row] for row in df.itertuples(index=False)]
            if query == "threads":  # string-pool offsets depend on the binary's build (docs/SQL.md)
                assert [r[2] for r in got] == [r[2] for r in expected]
            else:
                assert got == expected, query


@needs_bin
@pytest.mark.perfetto
def test_perfetto_extract_arg_same_as_mirror():
    sql = ("select name, extract_arg(arg_set_id, 'args.correlation') c from slice "
           "where category = 'kernel' order by ts")
    path = DATA / "4096_bf16_warm_compile.json"
    with open_trace(path, engine="perfetto", perfetto_bin=BIN) as p, open_trace(path, engine="sqlite") as m:
        assert p.query(sql).values.tolist() == m.query(sql).values.tolist()


def test_auto_without_binary_falls_back_fast(monkeypatch):
    monkeypatch.delenv("PERFETTO_BIN", raising=False)
    t0 = time.monotonic()
    with open_trace(DATA / "64_bf16_cold_eager.json", engine="auto", perfetto_timeout_s=3) as s:
        elapsed = time.monotonic() - t0
        assert s.engine in ("sqlite", "perfetto")
        if s.engine == "sqlite":
            assert s.engine_reason.startswith("perfetto: no trace_processor binary (set PERFETTO_BIN)")
            assert s.engine_reason.endswith("using the offline SQLite mirror")
            assert "\n" not in s.engine_reason
            assert "curl" not in s.engine_reason and "http" not in s.engine_reason  # plain words, no tool output
        assert s.query("select count(*) n from slice")["n"][0] == 34
    assert elapsed < 10


def test_perfetto_with_missing_binary_is_unavailable(tmp_path):
    with pytest.raises(EngineUnavailableError, match="does not exist or is not executable"):
        open_trace(DATA / "64_bf16_cold_eager.json", engine="perfetto", perfetto_bin=str(tmp_path / "nope"))


def test_auto_with_missing_binary_falls_back_with_reason(tmp_path):
    with open_trace(DATA / "64_bf16_cold_eager.json", perfetto_bin=str(tmp_path / "nope")) as s:
        assert s.engine == "sqlite"
        assert "does not exist" in s.engine_reason


def test_a_pipe_goes_to_the_mirror(tmp_path):
    """trace_processor is given a path to read, which a pipe cannot be twice (the size check would consume it): the
    perfetto engine says so, and auto mode reads the pipe with the mirror (under the same size cap)."""
    import sys
    import threading

    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as f:
            f.write((DATA / "64_bf16_cold_eager.json").read_bytes())

    threading.Thread(target=write, daemon=True).start()  # (for the first reader of the pipe)
    with pytest.raises(EngineUnavailableError, match=r"trace_processor reads regular files only, and .*trace\.fifo is "
                                                      r"a pipe \(FIFO\)"):
        open_trace(fifo, engine="perfetto", perfetto_bin=sys.executable)  # (never run: refused before)
    with open_trace(fifo, perfetto_bin=sys.executable) as s:
        assert s.engine == "sqlite"
        assert "reads regular files only" in s.engine_reason
        assert s.query("select count(*) n from slice")["n"][0] == 34

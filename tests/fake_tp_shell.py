"""A stand-in for ``trace_processor_shell -D --http-port PORT``: trace_processor's HTTP server, as perfetto's Python
client and the perfetto engine talk to it, for where no real trace_processor can run (not collected: no test_ prefix;
run it through :func:`shell_command`). Not the engine: it parses nothing.

- ``GET /status`` answers an empty ``StatusResult`` once the server listens (a real shell listens some
  milliseconds after it starts; this one before its imports, which only its queries wait for).
- ``POST /parse`` takes a chunk of the trace (an ``AppendTraceDataResult``, empty unless it has an error), ``GET
  /notify_eof`` ends the load; with ``$FAKE_TP_LOAD_S`` the load takes that many seconds from its first chunk, as a
  real trace_processor's parse takes time. The size and SHA-256 of what arrived are appended to ``$FAKE_TP_LOG`` as
  a JSON line (with the port and this process's pid) when the load ends; with ``$FAKE_TP_HOLD`` (a path) the load
  ends only once that file exists (at most a minute later); ``$FAKE_TP_PARSE_ERROR`` is the error every chunk gets.
- ``POST /query`` answers a ``QueryArgs`` with the ``QueryResult`` trace_processor would send: from
  ``$FAKE_TP_ANSWERS`` (msgpack ``{sql: QueryResult bytes}``, recorded by ``scripts/bench_processes.py``), else
  over trace_processor's recorded tables ``$FAKE_TP_TABLES`` (:class:`tp_recorded.RecordedTrace`), or over those of
  ``$FAKE_TP_TABLES_BY_SHA/<sha256 of what was loaded>`` (a folder of recordings, one per trace: each server answers
  for the file it was sent, as a command that opens two traces starts two); an error as
  ``QueryResult.error``. A query whose SQL holds the text ``$FAKE_TP_SLOW`` runs for a minute (a statement still running);
  ``$FAKE_TP_RECORD`` (a path) keeps every answer given, as ``$FAKE_TP_ANSWERS`` reads them.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent


def shell_command(folder: Path, **env: str) -> tuple[str, dict]:
    """(an executable file that runs this server with this interpreter, written in ``folder``; the environment
    variables to set for it, from ``env``: ``FAKE_TP_TABLES=...`` etc.)."""
    exe = Path(folder) / "trace_processor_shell"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    exe.chmod(0o755)
    return str(exe), {k: str(v) for k, v in env.items()}


def _protos() -> SimpleNamespace:
    """The RPC's messages, read from the descriptor the perfetto package ships without importing its client (which
    imports pandas: a real shell listens long before that would be done)."""
    sys.path.insert(0, str(HERE.parent))  # (this tree's, whichever tree the client runs)
    from profiling_core.trace._perfetto import rpc_message
    return SimpleNamespace(**{n: rpc_message(n) for n in
                              ("StatusResult", "AppendTraceDataResult", "QueryArgs", "QueryResult")})


def main(argv: list[str]) -> int:
    if "-D" not in argv or "--http-port" not in argv:
        print(f"fake trace_processor_shell: only '-D --http-port PORT' is served, got {argv}", file=sys.stderr)
        return 2
    port = int(argv[argv.index("--http-port") + 1])
    ctx: dict = {"answers": {}, "recording": None}
    ready = threading.Event()  # set once the messages and answers are read: it listens before (as a real shell
    # listens milliseconds after it starts); the load needs none of them, a query waits for them

    def setup() -> None:
        ctx["protos"] = _protos()
        if os.environ.get("FAKE_TP_ANSWERS"):
            import msgspec
            ctx["answers"] = msgspec.msgpack.decode(Path(os.environ["FAKE_TP_ANSWERS"]).read_bytes())
        if os.environ.get("FAKE_TP_TABLES"):
            sys.path.insert(0, str(HERE))
            import tp_recorded
            ctx["tp_recorded"] = tp_recorded
            ctx["recording"] = tp_recorded.RecordedTrace(Path(os.environ["FAKE_TP_TABLES"]), full_schema=True)
        ready.set()
    load_s = float(os.environ.get("FAKE_TP_LOAD_S") or 0)
    slow = os.environ.get("FAKE_TP_SLOW")
    parse_error = os.environ.get("FAKE_TP_PARSE_ERROR")
    state = {"bytes": 0, "sha": hashlib.sha256(), "first": None}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # perfetto keeps one connection for every request
        disable_nagle_algorithm = True  # (headers and body are two writes: Nagle would hold the body for an ACK)

        def log_message(self, *args) -> None:  # quiet, as trace_processor is to its client
            pass

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            if self.path == "/status":
                self._send(b"")  # (a StatusResult with no field set)
            elif self.path == "/notify_eof":
                if state["first"] is not None:
                    time.sleep(max(0.0, load_s - (time.monotonic() - state["first"])))
                hold = os.environ.get("FAKE_TP_HOLD")
                waited = time.monotonic()
                while hold and not os.path.exists(hold) and time.monotonic() - waited < 60:
                    time.sleep(0.01)
                log = os.environ.get("FAKE_TP_LOG")
                if log:
                    with open(log, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"port": port, "pid": os.getpid(), "bytes": state["bytes"],
                                            "sha256": state["sha"].hexdigest()}) + "\n")
                self._send(b"")
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            body = self._body()
            if self.path == "/parse":
                with lock:
                    if state["first"] is None:
                        state["first"] = time.monotonic()
                    state["bytes"] += len(body)
                    state["sha"].update(body)
                if parse_error:
                    ready.wait()
                    r = ctx["protos"].AppendTraceDataResult()
                    r.error = parse_error
                    self._send(r.SerializeToString())
                else:
                    self._send(b"")  # (an AppendTraceDataResult with no error)
            elif self.path == "/query":
                ready.wait()
                args = ctx["protos"].QueryArgs()
                args.ParseFromString(body)
                answer = self._answer(args.sql_query)
                if slow and slow in args.sql_query:
                    time.sleep(60)
                self._send(answer)
            else:
                self.send_error(404)

        def _answer(self, sql: str) -> bytes:
            answers, protos = ctx["answers"], ctx["protos"]
            if sql in answers:
                return answers[sql]
            try:
                by_sha = os.environ.get("FAKE_TP_TABLES_BY_SHA")
                if ctx["recording"] is None and by_sha:
                    sys.path.insert(0, str(HERE))
                    import tp_recorded
                    with lock:
                        folder = Path(by_sha) / state["sha"].hexdigest()
                        ctx["tp_recorded"] = tp_recorded
                        ctx["recording"] = tp_recorded.RecordedTrace(folder, full_schema=True)
                if ctx["recording"] is None:
                    raise RuntimeError(f"no recorded answer for: {sql[:200]}")
                with lock:
                    cols, rows = ctx["recording"].rows(sql)
                answer = ctx["tp_recorded"].encode_result(protos, cols, rows)
            except Exception as e:  # noqa: BLE001 - trace_processor's error text, in the result
                r = protos.QueryResult()
                r.error = str(e)
                answer = r.SerializeToString()
            record = os.environ.get("FAKE_TP_RECORD")
            if record:  # every answer so far, rewritten whole (a dozen queries a trace)
                import msgspec
                with lock:
                    answers[sql] = answer
                    Path(record).write_bytes(msgspec.msgpack.encode(answers))
            return answer

    server = ThreadingHTTPServer(("localhost", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=setup, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

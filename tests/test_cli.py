"""The CLI end to end, as a user runs it: real subprocesses, real worker, real files."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, scan_trace


def cli(*args, store=None, check=True):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "profiling_core", *args] + (["--store", str(store)] if store else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.mark.slow
def test_run_json_ls_show_rm(tmp_path):
    store = tmp_path / "runs"
    p = cli("run", "--size", "32", "--dtype", "fp32", "--device", "cpu", "--warmup", "--wait", "0",
            "--warmup-steps", "0", "--active", "2", "--json", store=store)
    out = json.loads(p.stdout)
    for key in ("run_id", "run_dir", "trace_path", "table_path", "status"):
        assert key in out
    assert out["status"] == "ok" and out["config"]["warmup"] == 10  # --warmup alone means 10
    names = [e["name"] for e in scan_trace(out["trace_path"]) if e.get("ph") == "X"]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2
    assert Path(out["table_path"]).read_text().strip()

    ls = json.loads(cli("ls", "--json", store=store).stdout)
    assert [r["run_id"] for r in ls] == [out["run_id"]]
    assert out["run_id"] in cli("ls", store=store).stdout
    shown = json.loads(cli("show", out["run_id"], "--json", store=store).stdout)
    assert shown["meta"]["config"]["size"] == 32
    assert "matmul_add" in cli("show", out["run_id"], store=store).stdout
    cli("rm", out["run_id"], store=store)
    assert json.loads(cli("ls", "--json", store=store).stdout) == []


@pytest.mark.parametrize("args,needle", [
    (["run", "--size", "0"], "size must be an integer from 1 to 65536, got 0"),
    (["run", "--size", "16384", "--batch", "4096", "--dtype", "fp32", "--device", "cpu"], "does_not_fit"),
    (["show", "../../etc"], "run id must be"),
    (["show", "nope"], "no run 'nope'"),
    (["run", "--device", "cuda", "--size", "8"], "cuda"),
])
def test_failures_exit_nonzero_with_one_line_and_no_traceback(tmp_path, args, needle):
    p = cli(*args, store=tmp_path / "runs", check=False)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert needle in lines[0]
    assert "Traceback" not in p.stderr


def test_import_and_analyze_registered(tmp_path):
    from conftest import DATA
    store = tmp_path / "runs"
    p = cli("import", str(DATA / "h200" / "64_bf16_cold_eager.json"), "--json", store=store)
    run = json.loads(p.stdout)
    assert Path(run["trace_path"]).exists()
    help_ = cli("--help").stdout
    for sub in ("run", "sweep", "ls", "show", "rm", "import", "analyze"):
        assert sub in help_


@pytest.mark.slow
def test_sweep_with_progress(tmp_path):
    p = cli("sweep", "--sizes", "16,32", "--compile-modes", "off", "--dtype", "fp32", "--device", "cpu",
            "--wait", "0", "--warmup-steps", "0", "--active", "1", "--json", store=tmp_path / "r")
    out = json.loads(p.stdout)
    assert len(out["runs"]) == 2 and out["errors"] == [] and out["cancelled"] is False
    assert sorted(r["name"] for r in out["runs"]) == ["16_fp32_cold_eager", "32_fp32_cold_eager"]


def test_a_reader_that_goes_away_is_not_an_error_message(tmp_path):
    # `true` exits at once, long before Python has started, so every write of `ls` meets a closed pipe.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(["bash", "-c", f'"{sys.executable}" -m profiling_core ls --store "{tmp_path}" | true; '
                                      f'"{sys.executable}" -m profiling_core ls --json --store "{tmp_path}" | true'],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.stderr == ""


def test_ls_shows_a_corrupt_run_and_rm_deletes_it(tmp_path):
    from conftest import DATA
    store = tmp_path / "runs"
    good = json.loads(cli("import", str(DATA / "cpu" / "64_fp32_warm_eager.json"), "--json", store=store).stdout)
    bad = {}
    for name, meta in [("device", '{"name": "n", "status": "ok", "device": "str"}'),
                       ("status", '{"status": ["x"]}'), ("deep", "[" * 100_000 + "]" * 100_000)]:
        run = json.loads(cli("import", str(DATA / "cpu" / "64_fp32_warm_eager.json"), "--name", name, "--json",
                             store=store).stdout)
        Path(run["run_dir"], "meta.json").write_text(meta)
        bad[name] = run["run_id"]
    listed = {r["run_id"]: r for r in json.loads(cli("ls", "--json", store=store).stdout)}
    assert listed[good["run_id"]]["status"] == "ok" and "error" not in listed[good["run_id"]]
    assert {listed[rid]["status"] for rid in bad.values()} == {"corrupt"}
    assert listed[bad["device"]]["error"] == "meta.json: Expected `object | null`, got `str` - at `$.device`"
    assert listed[bad["status"]]["error"] == "meta.json: Expected `str`, got `array` - at `$.status`"
    assert listed[bad["deep"]]["error"] == "meta.json nests too deeply to be read"
    human = cli("ls", store=store).stdout
    assert f"{bad['device']}" in human and "corrupt  meta.json: Expected `object | null`, got `str`" in human
    assert "error" in cli("show", bad["deep"], store=store).stdout
    cli("rm", *bad.values(), store=store)
    assert [r["run_id"] for r in json.loads(cli("ls", "--json", store=store).stdout)] == [good["run_id"]]


@pytest.mark.parametrize("kind", ["truncated", "empty-object", "nan", "nan-ts", "bom", "bom-gz", "good"])
def test_import_and_analyze_agree_on_what_is_a_trace(tmp_path, kind):
    import gzip
    from conftest import DATA
    good = (DATA / "cpu" / "64_fp32_warm_eager.json").read_bytes()
    content = {"truncated": good[: len(good) // 2], "empty-object": b"{}", "nan": b'{"traceEvents": NaN}',
               "nan-ts": good.replace(b'"ts": ', b'"ts": NaN, "x": ', 1),
               "bom": b"\xef\xbb\xbf" + good, "bom-gz": gzip.compress(b"\xef\xbb\xbf" + good), "good": good}[kind]
    path = tmp_path / f"{kind}.json"
    path.write_bytes(content)
    store = tmp_path / "runs"
    imported = cli("import", str(path), store=store, check=False)
    analyzed = cli("analyze", str(path), "--engine", "sqlite", check=False)
    assert (imported.returncode == 0) == (analyzed.returncode == 0), (imported.stderr, analyzed.stderr)
    assert (imported.returncode == 0) == (kind in ("bom", "bom-gz", "good")), imported.stderr
    runs = json.loads(cli("ls", "--json", store=store).stdout)
    if imported.returncode:
        assert imported.stderr == analyzed.stderr  # the same one-line reason
        assert runs == []
    else:
        assert [r["status"] for r in runs] == ["ok"]


def test_rm_with_an_unknown_id_among_them_deletes_none(tmp_path):
    """A typo among the ids: the command says which id is unknown and deletes none of the others (it deleted the
    ones before it, then failed, and its --json told nothing of them)."""
    from profiling_core import RunStore
    store = tmp_path / "runs"
    run = RunStore(store).import_trace(ROOT / "tests" / "data" / "cpu" / "64_fp32_warm_eager.json")
    for flags in ([], ["--json"]):
        p = cli("rm", *flags, run.run_id, "nope", store=store, check=False)
        assert p.returncode == 2 and "no run 'nope'" in p.stderr and p.stdout == ""
        assert [r.run_id for r in RunStore(store).list()] == [run.run_id]
    assert json.loads(cli("rm", "--json", run.run_id, store=store).stdout) == {"deleted": [run.run_id]}


def test_rm_with_an_id_given_twice_deletes_it_once_and_says_so(tmp_path):
    """The same id twice: the run was deleted, then the second "no run" made the command exit 2 (and its --json
    printed nothing of the deletion)."""
    from profiling_core import RunStore
    store = tmp_path / "runs"
    run = RunStore(store).import_trace(ROOT / "tests" / "data" / "cpu" / "64_fp32_warm_eager.json")
    p = cli("rm", "--json", run.run_id, run.run_id, store=store, check=False)
    assert p.returncode == 0 and json.loads(p.stdout) == {"deleted": [run.run_id]}
    assert RunStore(store).list() == []


def test_json_output_holds_no_nan_whatever_a_meta_json_holds(tmp_path):
    """A meta.json field outside the checked schema written as NaN or Infinity (a run made elsewhere and copied in):
    `show --json` printed it as NaN, which is no JSON (JavaScript's JSON.parse refuses it). It prints null."""
    from profiling_core import RunStore
    store = tmp_path / "runs"
    run = RunStore(store).import_trace(ROOT / "tests" / "data" / "cpu" / "64_fp32_warm_eager.json")
    meta_path = run.run_dir / "meta.json"
    text = meta_path.read_text()
    meta_path.write_text(text.rstrip().rstrip("}") + ', "extra_field": NaN, "other": -Infinity}')
    out = cli("show", "--json", run.run_id, store=store).stdout

    def refuse(c):
        raise ValueError(f"{c} is no JSON")
    meta = json.loads(out, parse_constant=refuse)["meta"]
    assert meta["extra_field"] is None and meta["other"] is None


@pytest.mark.parametrize("args", [["--sizes", ","], ["--sizes", ""], ["--compile-modes", ""], ["--warmups", ","]])
def test_a_sweep_of_an_empty_list_is_refused(tmp_path, args):
    """`sweep --sizes ,` ran nothing and reported "0 ok, 0 failed" with status 0."""
    p = cli("sweep", "--device", "cpu", *args, store=tmp_path / "runs", check=False)
    assert p.returncode == 2 and "must name at least one" in p.stderr and not (tmp_path / "runs").exists()


def test_ls_lists_only_the_runs_show_and_rm_accept(tmp_path):
    """A link in the store to a run folder elsewhere: ``ls`` listed it, and ``show`` and ``rm`` then refused the id
    it printed ("resolves outside the run store")."""
    store = tmp_path / "runs"
    rid = json.loads(cli("import", str(ROOT / "tests" / "data" / "cpu" / "64_fp32_warm_eager.json"), "--json",
                         store=store).stdout)["run_id"]
    outside = tmp_path / "elsewhere"
    (store / rid).rename(outside)
    (store / rid).symlink_to(outside, target_is_directory=True)
    assert cli("show", rid, store=store, check=False).returncode == 2  # refused: it is not the store's
    assert json.loads(cli("ls", "--json", store=store).stdout) == []
    assert "no runs in" in cli("ls", store=store).stdout


def test_a_store_that_is_a_file_is_refused_not_read_as_empty(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("my notes\n")
    for args in (["ls"], ["ls", "--json"], ["show", "20260101-000000-x-0000"]):
        p = cli(*args, store=f, check=False)
        assert p.returncode == 2 and "is not a folder" in p.stderr and p.stdout == "", args
    assert f.read_text() == "my notes\n"  # nothing the user made is touched

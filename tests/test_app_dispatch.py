"""AppTest: Dispatch and launch (chain, launch paths, latency, cold vs warm, sync wait)."""
from __future__ import annotations

import pytest

from conftest_app import app, download, errors_of, import_trace, H200
from profiling_core.present import md_code, md_text
from profiling_core.units import format_duration_us


GPU_ONLY_SECTIONS = {"How each kernel was launched", "Launch latency: why the GPU lane is offset",
                     "The synchronize at the end: busy or idle?"}


def test_dispatch_on_a_cpu_trace_says_why_gpu_panels_are_left_out(seed_run):
    at = app("dispatch")
    assert not errors_of(at)
    assert any("no GPU lane" in i.value for i in at.info)
    assert "aten::mm" in at.code[0].value
    headers = {h.value for h in at.header}
    assert "The dispatch chain of a step" in headers and not GPU_ONLY_SECTIONS & headers


def test_dispatch_on_an_h200_trace(runs_dir, media):
    import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "64_bf16_cold_eager")
    at = app("dispatch")
    assert not errors_of(at)
    assert GPU_ONLY_SECTIONS <= {h.value for h in at.header}
    tree = at.code[0].value
    assert "ProfilerStep#" in tree and "aten::mm" in tree and "cuLaunchKernelEx" in tree
    text = " ".join(m.value for m in at.markdown)
    assert "no occupancy query" in text and "idle" in text
    assert download(at, media, "png_dispatch_latency")[:4] == b"\x89PNG"
    assert download(at, media, "csv_dispatch_sync").startswith(b"id,name")
    assert download(at, media, "svg_dispatch_flame").lstrip().startswith(b"<svg")
    report = download(at, media, "report_dispatch").decode()
    assert report.count("<svg") >= 3 and "cuLaunchKernelEx" in report


@pytest.mark.slow
def test_cold_warm_pair_through_the_form(runs_dir, media):
    at = app("dispatch")
    at.select_slider(key="cw_size").set_value(64)
    at.selectbox(key="cw_dtype").set_value("fp32")
    at.selectbox(key="cw_device").set_value("cpu")
    assert at.number_input(key="cw_pairs").value == 3  # three pairs on a CPU by default
    at.number_input(key="cw_pairs").set_value(2)
    [go] = [b for b in at.button if b.label.startswith("Run cold + warm pair")]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    assert any("Done: 4 run(s)" in s.value for s in at.success)
    assert any("The median of 2 pairs per step" in c.value for c in at.caption)
    import csv as _csv
    import io
    rows = list(_csv.DictReader(io.StringIO(download(at, media, "csv_dispatch_coldwarm").decode())))
    assert {r["label"] for r in rows} == {"cold · 64_fp32_cold_eager", "warm · 64_fp32_warm_eager"}
    for r in rows:  # each step position: the median of two runs within their range
        assert r["n"] == "2" and float(r["lo_us"]) <= float(r["dur_us"]) <= float(r["hi_us"])


def test_the_chain_starts_at_the_op_the_user_picks(runs_dir):
    from conftest_app import DATA, import_trace
    import_trace(runs_dir, DATA / "h200_diag" / "bf16_4096.json", "bf16_4096")
    at = app("dispatch")
    at.selectbox(key="dispatch_op").set_value("aten::add").run()
    assert not errors_of(at)
    (code,) = [c.value for c in at.code if "aten::add" in c.value]
    assert code.splitlines()[0].startswith("aten::add") and "aten::mm" not in code and "CUDAFunctor_add" in code


def test_each_kernel_of_the_chain_sits_under_the_call_that_launched_it(runs_dir):
    """The H200's 64 run: the GEMM kernel is launched by aten::mm's cuLaunchKernelEx (a plain scan: the same
    correlation), the add's kernel by aten::add's cudaLaunchKernel; the text once hung both under the last call.
    A trace with [memory] events offers no [memory] instant as an op to start the chain at."""
    from conftest_app import DATA
    from test_machines import copy_h200_run
    copy_h200_run(runs_dir, "sweep_64_warm_eager")
    at = app("dispatch")
    assert not errors_of(at)
    lines = at.code[0].value.splitlines()
    mm = next(i for i, x in enumerate(lines) if "cuLaunchKernelEx" in x)
    assert "nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT" in lines[mm + 1]
    assert "aten::add" in lines[mm + 2] and "cudaLaunchKernel" in lines[mm + 3] and "elementwise" in lines[mm + 4]
    import_trace(runs_dir, DATA / "h200_memory" / "eager.json", "memory_eager")
    mem = app("dispatch")
    assert not errors_of(mem)
    assert "[memory]" not in mem.selectbox(key="dispatch_op").options


def test_one_run_is_not_compared_with_itself_as_cold_and_warm(runs_dir, media):
    """A store with one warm run and no cold one: the cold/warm pickers fall back to it for both, and the page said
    'cold · 64_fp32_warm_eager' against 'warm · 64_fp32_warm_eager'. It says there is no pair; the report names the
    run with where it was recorded, and calls the environment the machine that wrote the report."""
    from test_machines import copy_h200_run
    copy_h200_run(runs_dir, "sweep_64_warm_eager")
    at = app("dispatch")
    assert not errors_of(at)
    assert any("The cold and the warm run are the same run" in i.value for i in at.info)
    report = download(at, media, "report_dispatch").decode()
    assert "cold · 64_bf16_warm_eager" not in report
    assert "recorded on" in report and "NVIDIA H200 on vm" in report and "Where this report was written" in report


def test_the_report_holds_the_launch_paths_and_names_the_cold_warm_pair(runs_dir, media):
    from test_machines import copy_h200_run
    cold = copy_h200_run(runs_dir, "coldwarm_64_cold_eager")
    warm = copy_h200_run(runs_dir, "coldwarm_64_warm_eager")
    at = app("dispatch")
    assert not errors_of(at)
    report = download(at, media, "report_dispatch").decode()
    assert "How each kernel was launched" in report and "launch paths" in report
    assert "Pattern: no occupancy query precedes any launch" in report
    assert cold in report and warm in report and "matmul_add start → first aten op" in report


def test_launch_delays_below_0_are_said_as_ops_that_started_before_their_call(runs_dir, tmp_path):
    """The launch-latency caption printed "Median launch → start: -499.99 ms" for a trace whose GPU ops start before
    their launch calls (its clocks not aligned, or an edited file); it now says so, as question 4 does."""
    import json
    from test_odd_traces import EAGER

    doc = json.loads(EAGER.read_text())
    evs = doc["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and isinstance(e.get("args", {}).get("correlation"), int)}
    early = [k for k in evs if k.get("cat") == "kernel" and k["args"].get("correlation") in launches]
    for k in early:
        k["ts"] = launches[k["args"]["correlation"]]["ts"] - 40
    (tmp_path / "early.json").write_text(json.dumps(doc))
    import_trace(runs_dir, tmp_path / "early.json", "early")
    at = app("dispatch")
    assert not errors_of(at), errors_of(at)
    (cap,) = [c.value for c in at.caption if c.value.startswith("Median launch → start")]
    assert cap.startswith("Median launch → start: 40.0 µs before its call; max 40.0 µs before its call. "
                          f"{len(early)} of the {len(early)} GPU ops started before their launch call")


def test_the_latency_chart_leaves_the_compilers_launches_out(runs_dir, media):
    """An H100's 4096² cold max-autotune run: 4,942 of its 4,951 launch pairs are the autotuner's benchmarks; the
    chart and its median read the workload's 9, as question 4 does."""
    import csv
    import io
    import statistics
    from pathlib import Path
    from conftest import scan_trace
    path = Path(__file__).parent / "data" / "h100" / "autotune_4096_cold_manc.json.gz"
    import_trace(runs_dir, path, "autotune_4096_cold_manc")
    at = app("dispatch")
    assert not errors_of(at), errors_of(at)
    rows = list(csv.DictReader(io.StringIO(download(at, media, "csv_dispatch_latency").decode())))
    ops = [e for e in scan_trace(path) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(ops) == 4951 and len(rows) == 9
    assert any("4,942 GPU ops launched inside torch.compile's compiler ranges" in c.value for c in at.caption)
    median = statistics.median(float(r["latency_us"]) for r in rows)
    assert any(f"Median launch → start: {median:.1f} µs" in c.value for c in at.caption)


def test_each_rank_s_step_of_a_merged_file_is_a_step_of_its_own(runs_dir, tmp_path):
    """The H200's 64² cold run and a copy of it 7 µs later as a second rank (pid + 100000) in one file: step N is a
    slice per rank, and the chain of "ProfilerStep#N" held both ranks' trees. The picker names each slice by its
    process, and a slice's chain holds its own rank's step alone (one ProfilerStep line, its kernels once)."""
    import verdict_traces as vt
    from conftest import scan_trace
    from conftest_app import DATA
    two = vt.as_ranks(DATA / "h200" / "64_bf16_cold_eager.json", tmp_path / "two.json")
    steps = [e for e in scan_trace(two) if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    pids = sorted({e["pid"] for e in steps})
    import_trace(runs_dir, two, "two_ranks")
    at = app("dispatch")
    assert not errors_of(at)
    options = at.selectbox(key="dispatch_step").options
    numbers = sorted({e["name"] for e in steps})
    assert sorted(options) == sorted(f"{n} (pid {p})" for n in numbers for p in pids)
    last = [o for o in options if o.startswith(numbers[-1]) and o.endswith(f"(pid {pids[1]})")]
    at.selectbox(key="dispatch_step").select_index(options.index(last[0])).run()
    assert not errors_of(at)
    code = at.code[0].value
    assert code.count("ProfilerStep#") == 1 and code.count("nvjet") == 1


@pytest.mark.parametrize("name,outside,inside", [("autotune_4096_cold_manc", 1, 144), ("autotune_64_cold_ma", 6, 129)])
def test_the_sync_section_leaves_the_compilers_synchronizes_out(runs_dir, media, name, outside, inside):
    """An H100's cold max-autotune runs: of the 4096 run's 145 synchronize calls 144 lie inside torch.compile's
    ``(dynamo_timed)`` ranges (its benchmarks', the longest 23.74 ms), one outside (a plain scan). The section listed
    "The 30 longest of 145 synchronize calls" led by the compiler's, where question 7 on the page reads the one
    outside. It now draws and lists the calls outside, as question 7 does, and says how many it left out."""
    import csv
    import io
    from conftest import scan_trace
    from conftest_app import DATA
    path = DATA / "h100" / f"{name}.json.gz"
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    ranges = [(e["ts"], e["ts"] + e["dur"]) for e in xs if "(dynamo_timed)" in str(e.get("name"))]
    syncs = [e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Synchronize" in e["name"]]
    mine = [e for e in syncs if not any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in ranges)]
    assert (len(mine), len(syncs) - len(mine)) == (outside, inside)
    import_trace(runs_dir, path, name)
    at = app("dispatch")
    assert not errors_of(at), errors_of(at)
    rows = list(csv.DictReader(io.StringIO(download(at, media, "csv_dispatch_sync").decode())))
    assert sorted(round(float(r["dur_us"]), 1) for r in rows) == sorted(round(e["dur"], 1) for e in mine)
    bullets = [m.value for m in at.markdown if m.value.startswith("- ") and " lasted " in m.value]
    assert len(bullets) == outside
    assert f"lasted {format_duration_us(max(e['dur'] for e in mine))}" in bullets[0]
    assert any(c.value.startswith(f"{inside:,} synchronize calls made inside torch.compile's compiler ranges")
               for c in at.caption)


def _queried_launches(path) -> tuple[dict, int]:
    """A plain scan of the launch calls in time order: {kernel name: [whether one or more occupancy queries came
    right before each of its launch calls, in order]}, and how many occupancy queries the trace holds."""
    from conftest import scan_trace
    xs = sorted((e for e in scan_trace(path) if e.get("ph") == "X"), key=lambda e: e["ts"])
    kernel_of = {e["args"]["correlation"]: e["name"] for e in xs
                 if str(e.get("cat", "")).lower() == "kernel" and "correlation" in (e.get("args") or {})}
    out: dict = {}
    pending = queries = 0
    for e in xs:
        if str(e.get("cat", "")).lower() not in ("cuda_runtime", "cuda_driver", "runtime"):
            continue
        if "Occupancy" in e["name"]:
            pending, queries = pending + 1, queries + 1
        elif "LaunchKernel" in e["name"]:
            name = kernel_of.get((e.get("args") or {}).get("correlation"))
            if name is not None:
                out.setdefault(name, []).append(pending > 0)
            pending = 0
    return out, queries


def _pattern_line(at) -> str:
    (line,) = [m.value for m in at.markdown if m.value.startswith("**Pattern")]
    return line


@pytest.mark.parametrize("name", ["coldwarm_64_cold_eager", "autotune_4096_cold_manc"])
def test_the_pattern_line_says_a_first_launch_query_is_no_per_launch_pattern(runs_dir, name):
    """The H200's cold 64 run and an H100's cold max-autotune run: a plain scan finds occupancy queries before one
    launch call alone, the first of a GEMM kernel's (3 launches; 109), none before the other 5 (4,684) calls. The
    bold line said "Pattern: occupancy query before the launch (as on the A100 in the post)" where question 6 on
    the page says "only before the first of its launches ... a one-time query, not a per-launch pattern"."""
    from conftest_app import DATA
    from test_machines import copy_h200_run
    path = DATA / "h200_app" / f"{name}.json" if name.startswith("coldwarm") else DATA / "h100" / f"{name}.json.gz"
    launches, _ = _queried_launches(path)
    (queried,) = [n for n, flags in launches.items() if any(flags)]
    assert launches[queried][0] and sum(launches[queried]) == 1 < len(launches[queried])
    if name.startswith("coldwarm"):
        copy_h200_run(runs_dir, name)
    else:
        import_trace(runs_dir, path, name)
    at = app("dispatch")
    assert not errors_of(at), errors_of(at)
    line = _pattern_line(at)
    assert line.startswith("**Pattern: no occupancy query per launch**: queries only before the first launch of")
    assert md_code(queried, 50) in line and "every launch" not in line and "A100" not in line
    assert any(md_text("a one-time query on the op's first call") in m.value
               and md_text("not a per-launch pattern") in m.value for m in at.markdown)  # question 6, below


def test_the_pattern_line_does_not_deny_queries_question_6_cannot_place(runs_dir):
    """A third-party inference trace: a plain scan finds 4 occupancy queries, 2 right before 2 of its 4 launch calls,
    but none sits under an op that launched a kernel, so question 6 says which launch each sizes cannot be read. The
    bold line said "Pattern: no occupancy query precedes any launch"; it now says what question 6 says."""
    from conftest_app import DATA
    path = DATA / "third_party" / "inference_rank_1.json.gz"
    launches, queries = _queried_launches(path)
    assert queries == 4 and sum(f for flags in launches.values() for f in flags) == 2
    import_trace(runs_dir, path, "inference_rank_1")
    at = app("dispatch")
    assert not errors_of(at), errors_of(at)
    line = _pattern_line(at)
    assert "no occupancy query" not in line
    assert line.startswith(f"**Pattern: not readable from this trace**: it holds {queries} occupancy queries")
    assert any(md_text("which launch each one sizes cannot be read") in m.value for m in at.markdown)  # question 6

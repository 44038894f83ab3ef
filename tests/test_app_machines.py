"""AppTest: the Runs page by machine, its comparison of one config across machines and its import of another
store; the Overhead page's sweep, one curve per machine. Hostile machine names stay text."""
from __future__ import annotations

from conftest_app import app, download, errors_of
from test_app_hostile_names import HOSTILE, live_names
from test_h200_app_traces import meta
from test_machines import copy_h200_run
from profiling_core.store.machines import PART_MAX

SHOWN = HOSTILE.strip()[:PART_MAX]  # a machine keeps the first PART_MAX characters of a name
LABEL = f"{SHOWN} on {SHOWN}"
A100 = dict(meta("sweep_64_warm_eager")["device"], name="NVIDIA A100-SXM4-80GB")


def seed_two_machines(runs_dir, host="lab", device=A100):
    """The H200's 64 and 2048 runs, and the same two configs as if run on a second machine."""
    ids = {"h64": copy_h200_run(runs_dir, "sweep_64_warm_eager"),
           "h2048": copy_h200_run(runs_dir, "sweep_2048_warm_eager")}
    ids["o64"] = copy_h200_run(runs_dir, "sweep_64_warm_eager", "-other", host={"hostname": host}, device=device)
    ids["o2048"] = copy_h200_run(runs_dir, "sweep_2048_warm_eager", "-other", host={"hostname": host}, device=device)
    return ids


def frames(at) -> list:
    return [d.value for d in at.dataframe]


def comparison_table(at):
    """The comparison's table: one row per machine, with its run count and spread."""
    [table] = [f for f in frames(at) if {"n", "cpu_us_per_step_spread_pct", "fraction_of_peak"} <= set(f.columns)]
    return table


def test_the_runs_page_groups_runs_by_machine_and_compares_them(runs_dir, media):
    seed_two_machines(runs_dir)
    at = app("runs")
    assert not errors_of(at)
    runs = frames(at)[0]
    assert list(runs["machine"]) == ["NVIDIA H200 on vm"] * 2 + ["NVIDIA A100-SXM4-80GB on lab"] * 2 or \
        list(runs["machine"]) == ["NVIDIA A100-SXM4-80GB on lab"] * 2 + ["NVIDIA H200 on vm"] * 2
    [machines] = [f for f in frames(at) if list(f.columns)[:2] == ["machine", "device"] and "runs" in f.columns]
    assert machines.set_index("machine")["runs"].to_dict() == {"NVIDIA H200 on vm": 2,
                                                               "NVIDIA A100-SXM4-80GB on lab": 2}
    configs = at.selectbox(key="runs_machines_config").options
    assert len(configs) == 2  # 64 and 2048, each on both machines
    table = comparison_table(at)
    assert set(table["machine"]) == {"NVIDIA H200 on vm", "NVIDIA A100-SXM4-80GB on lab"}
    shown = {r["machine"]: r for _, r in table.iterrows()}
    # the newest config first: the 2048 runs (their meta's start times), each row the trace's own step
    assert {r["run"] for r in shown.values()} == {meta("sweep_2048_warm_eager")["name"]}
    at.selectbox(key="runs_machines_config").set_value([c for c in configs if c.startswith("64_")][0]).run()
    assert not errors_of(at)
    table = comparison_table(at)
    assert set(table["run"]) == {meta("sweep_64_warm_eager")["name"]}
    assert download(at, media, "csv_runs_machines").startswith(b"machine,")


def test_an_imported_store_takes_part_in_the_comparison(runs_dir, tmp_path):
    other = tmp_path / "other_store"
    copy_h200_run(other, "sweep_64_warm_eager", "-other", host={"hostname": "lab"}, device=A100)
    (other / "broken run").mkdir()  # not a run id: skipped with the reason
    copy_h200_run(runs_dir, "sweep_64_warm_eager")
    at = app("runs")
    assert not errors_of(at)
    assert not [s for s in at.selectbox if s.key == "runs_machines_config"]  # one machine: nothing to compare yet
    at.text_input(key="runs_import_path").set_value(str(other))
    [go] = [b for b in at.button if b.label == "Import the store"]
    go.click().run()
    assert not errors_of(at)
    assert any("Imported 1 run(s)" in s.value for s in at.success)
    assert any("broken" in w.value and "not a run folder" in w.value for w in at.warning)
    assert len(at.selectbox(key="runs_machines_config").options) == 1
    table = comparison_table(at)
    assert set(table["machine"]) == {"NVIDIA H200 on vm", "NVIDIA A100-SXM4-80GB on lab"}


def test_a_bad_store_path_is_a_clear_error(runs_dir, tmp_path):
    copy_h200_run(runs_dir, "sweep_64_warm_eager")
    at = app("runs")
    at.text_input(key="runs_import_path").set_value(str(tmp_path / "nowhere"))
    [go] = [b for b in at.button if b.label == "Import the store"]
    go.click().run()
    assert [e.value for e in at.exception] == []
    assert any("neither a folder nor a file" in e.value for e in at.error)


def test_hostile_machine_names_are_text_on_the_runs_page(runs_dir, media):
    hostile_device = dict(A100, name=HOSTILE)
    seed_two_machines(runs_dir, host=HOSTILE, device=hostile_device)
    at = app("runs")
    assert [e.value for e in at.exception] == []
    assert live_names(at) == []
    [machines] = [f for f in frames(at) if list(f.columns)[:2] == ["machine", "device"] and "runs" in f.columns]
    assert LABEL in set(machines["machine"])
    table = comparison_table(at)
    assert LABEL in set(table["machine"])
    report = download(at, media, "report_runs").decode()
    assert "<img" not in report and "<!--<script>" not in report


def test_the_sweep_overlays_machines_one_curve_each(runs_dir, media):
    ids = seed_two_machines(runs_dir, host=HOSTILE, device=dict(A100, name=HOSTILE))
    at = app("overhead")
    at.multiselect(key="overhead_chosen").set_value(list(ids.values())).run()
    assert [e.value for e in at.exception] == []
    assert live_names(at) == []
    [sweep] = [f for f in frames(at) if "cpu_us_per_step_spread_pct" in f.columns]
    assert set(sweep["mode"]) == {"eager · NVIDIA H200 on vm", f"eager · {LABEL}"}
    assert sorted(sweep["size"]) == [64, 64, 2048, 2048]
    csv = download(at, media, "csv_overhead_main").decode()
    assert "eager · NVIDIA H200 on vm" in csv


def test_repeated_runs_show_their_count_spread_and_what_counts_as_a_difference(runs_dir, media):
    from test_machines import A100_RUNS, H200_RUNS, runs_of_one_config
    runs_of_one_config(runs_dir, {"h200": H200_RUNS, "a100": A100_RUNS})
    at = app("runs")
    assert [e.value for e in at.exception] == [] and not errors_of(at)
    table = comparison_table(at).set_index("machine")
    assert table["n"].to_dict() == {"NVIDIA H200 on vm": 3, "NVIDIA A100-SXM4-80GB on lab": 2}
    lo, hi = table.loc["NVIDIA H200 on vm", ["cpu_us_per_step_min", "cpu_us_per_step_max"]]
    assert lo < table.loc["NVIDIA H200 on vm", "cpu_us_per_step"] < hi
    assert table["cpu_us_per_step_spread_pct"].notna().all()
    [gaps] = [f for f in frames(at) if "verdict" in f.columns and "machine_a" in f.columns]
    verdicts = gaps.set_index("value")["verdict"].to_dict()
    assert verdicts["cpu_us_per_step"] == "too noisy to tell" and verdicts["gpu_busy_us_per_step"] == "differs"
    [each] = [f for f in frames(at) if "run_id" in f.columns and "bound" in f.columns]
    assert len(each) == 5
    assert not any("ran it once" in c.value for c in at.caption)
    # by hand (each run's steps after the first): the H200's CPU medians 74.7–187.9 µs around 180.5 (63 %), the
    # A100's 60.8–81.7 around 71.2 (29 %), both past 20 %: said, by machine (the page escapes Markdown: backslashes
    # dropped here)
    said = [w.value.replace("\\", "") for w in at.warning if "spread by more than 20%" in w.value.replace("\\", "")]
    assert len(said) == 1
    assert "machine NVIDIA H200 on vm (n=3: 63%)" in said[0]
    assert "machine NVIDIA A100-SXM4-80GB on lab (n=2: 29%)" in said[0]
    assert download(at, media, "csv_runs_machines").startswith(b"machine,")


def test_a_machine_with_one_run_is_said_to_have_no_known_spread(runs_dir):
    seed_two_machines(runs_dir)
    at = app("runs")
    assert not errors_of(at)
    table = comparison_table(at)
    assert list(table["n"]) == [1, 1] and table["cpu_us_per_step_spread_pct"].isna().all()
    assert any("2 machine(s) ran it once" in c.value for c in at.caption)
    [gaps] = [f for f in frames(at) if "verdict" in f.columns and "machine_a" in f.columns]
    assert set(gaps["verdict"]) == {"one run: spread unknown"}


def test_a_verdict_that_differs_with_one_run_each_is_not_called_a_machine_difference(runs_dir):
    from test_machines import runs_of_one_config
    # the 64 run is overhead-bound, the 8192 run compute-bound, each as its own q2 finding says
    runs_of_one_config(runs_dir, {"h200": ["sweep_64_warm_eager"], "a100": ["sweep_8192_warm_eager"]})
    at = app("runs")
    assert [e.value for e in at.exception] == [] and not errors_of(at)
    [diff] = [f for f in frames(at) if {"kind", "id", "verdict"} <= set(f.columns)]
    row = diff.set_index("id").loc["q2.bound"]
    assert row["NVIDIA H200 on vm"] != row["NVIDIA A100-SXM4-80GB on lab"]
    assert row["verdict"] == "one run: differs between the runs, spread unknown"
    assert "differs" not in set(diff["verdict"])
    said = [c.value.replace("\\", "") for c in at.caption if "By id:" in c.value]
    assert len(said) == 1 and "one run cannot tell the machines apart from run-to-run variation" in said[0]


def test_a_run_whose_trace_is_lost_is_left_out_of_the_machines_comparison(runs_dir):
    """One machine's run of the config shown lost its trace: the comparison of machines stopped the page at its error
    box, before Compare two runs and the delete form the box points to. It now says which run cannot be read,
    compares the others, and the rest of the page is drawn."""
    ids = seed_two_machines(runs_dir)
    (runs_dir / ids["o2048"] / "trace.json").unlink()
    at = app("runs")
    at.selectbox(key="runs_a").set_value(ids["h64"])
    at.selectbox(key="runs_b").set_value(ids["h2048"]).run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = [e.value for e in at.error]
    assert "Cannot read the trace of run" in error and ids["o2048"] in error.replace("\\", "")  # (escaped)
    assert list(comparison_table(at)["machine"]) == ["NVIDIA H200 on vm"]
    assert [h.value for h in at.header][-3:] == ["Compare two runs", "Import another machine's runs", "Delete a run"]
    assert "Findings" in [s.value for s in at.subheader]

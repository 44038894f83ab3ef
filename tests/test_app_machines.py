"""AppTest: the Runs page by machine, its comparison of one config across machines and its import of another
store; the Overhead page's sweep, one curve per machine. Hostile machine names stay text."""
from __future__ import annotations

from conftest_app import app, download, errors_of, media, runs_dir  # noqa: F401
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
    [table] = [f for f in frames(at) if "fraction_of_peak" in f.columns and "machine" in f.columns]
    assert set(table["machine"]) == {"NVIDIA H200 on vm", "NVIDIA A100-SXM4-80GB on lab"}
    shown = {r["machine"]: r for _, r in table.iterrows()}
    # the newest config first: the 2048 runs (their meta's start times), each row the trace's own step
    assert {r["run"] for r in shown.values()} == {meta("sweep_2048_warm_eager")["name"]}
    at.selectbox(key="runs_machines_config").set_value([c for c in configs if c.startswith("64_")][0]).run()
    assert not errors_of(at)
    [table] = [f for f in frames(at) if "fraction_of_peak" in f.columns and "machine" in f.columns]
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
    [table] = [f for f in frames(at) if "fraction_of_peak" in f.columns and "machine" in f.columns]
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
    [table] = [f for f in frames(at) if "fraction_of_peak" in f.columns and "machine" in f.columns]
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

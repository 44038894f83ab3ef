"""Machines: where a run ran, runs grouped by machine, one config matched across machines and compared, and another
store's runs imported (a folder, a tarball, a hostile tarball).

The H200 runs are the real ones of tests/data/h200_app; the CPU run is made here, with the same config as the H200's
``sweep_64_warm_eager`` but on this machine's CPU. Expected values come from plain JSON scans of the traces and from
the runs' meta.json read here as JSON, never from the code under test.
"""
from __future__ import annotations

import io
import json
import math
import shutil
import statistics
import tarfile
from pathlib import Path

import pytest

from profiling_core import ExperimentConfig, RunStore, analyze, diagnose, findings, open_trace
from profiling_core.errors import RunStoreError
from profiling_core.present import (ABSENT, MACHINE_COMPARISON_COLUMNS, comparison_warnings, machine_comparison,
                                    machine_labels, machines_table)
from profiling_core.store import (DATASHEETS, UNKNOWN, DevicePeaks, PeakBook, Run, group_by_machine, machine_of,
                                  match_configs)

from conftest import steady
from test_h200_app_traces import DATA as APP, meta
from test_summaries import plain_step_medians

CPU_TRACE = Path(__file__).parent / "data" / "cpu" / "64_fp32_warm_eager.json"
TOL = 0.05  # µs: the library keeps integer ns, the JSON has fractional µs


def copy_h200_run(root: Path, name: str, suffix: str = "", **meta_changes) -> str:
    """An H200 run of tests/data/h200_app as a run folder of the store at ``root``, its meta.json changed as given,
    its run id ending in ``suffix``."""
    m = dict(meta(name), **meta_changes)
    rid = m["run_id"] = m["run_id"] + suffix
    d = root / rid
    d.mkdir(parents=True)
    shutil.copyfile(APP / f"{name}.json", d / "trace.json")
    shutil.copyfile(APP / f"{name}.txt", d / "table.txt")
    (d / "meta.json").write_text(json.dumps(m))
    return rid


def run_with(meta_: dict) -> Run:
    return Run("r1", Path("/nonexistent"), meta_)


# --- the machine of a run -------------------------------------------------------------------------------------------

def test_a_run_made_here_is_its_device_on_its_host():
    m = machine_of(run_with(meta("sweep_64_warm_eager")))
    assert (m.label, m.host, m.device, m.kind, m.known) == ("NVIDIA H200 on vm", "vm", "NVIDIA H200", "cuda", True)


def test_a_ray_run_is_its_node():
    node = {"hostname": "gpu-node-7", "device_name": "NVIDIA A100-SXM4-80GB", "driver": "550", "torch": "2.11"}
    m = machine_of(run_with(dict(meta("sweep_64_warm_eager"), node=node)))
    assert (m.label, m.host, m.device) == ("NVIDIA A100-SXM4-80GB on gpu-node-7", "gpu-node-7", "NVIDIA A100-SXM4-80GB")


def test_an_imported_trace_is_an_unknown_machine(tmp_path):
    run = RunStore(tmp_path / "runs").import_trace(CPU_TRACE, name="cpu")
    assert machine_of(run) == UNKNOWN and machine_of(run).label == "unknown machine"


@pytest.mark.parametrize("bad", [None, 7, ["vm"], {"a": 1}, "", "   "])
def test_values_that_are_not_names_count_as_missing(bad):
    m = machine_of(run_with({"source": "experiment", "host": {"hostname": bad}, "device": {"name": bad, "type": "cpu"}}))
    assert (m.label, m.host, m.device) == ("cpu", None, "cpu")
    assert machine_of(run_with({"source": "experiment", "host": bad, "device": bad})) == UNKNOWN


def test_a_cpu_and_a_gpu_of_one_host_are_two_machines():
    gpu = machine_of(run_with(meta("sweep_64_warm_eager")))
    cpu = machine_of(run_with(dict(meta("sweep_64_warm_eager"), device={"type": "cpu", "name": "AMD EPYC"})))
    assert gpu.key != cpu.key and cpu.label == "AMD EPYC on vm"


# --- grouping and matching ------------------------------------------------------------------------------------------

@pytest.fixture
def two_machines(tmp_path):
    """The H200's 64 and 2048 runs, the 64 run again as if on a second machine (another host, an A100), an
    imported trace and a corrupt run."""
    root = tmp_path / "runs"
    h64 = copy_h200_run(root, "sweep_64_warm_eager")
    h2048 = copy_h200_run(root, "sweep_2048_warm_eager")
    other = dict(meta("sweep_64_warm_eager")["device"], name="NVIDIA A100-SXM4-80GB")
    a64 = copy_h200_run(root, "sweep_64_warm_eager", "-a100", host={"hostname": "lab"}, device=other,
                        started_at="2026-11-30T10:00:00+00:00")
    store = RunStore(root)
    imp = store.import_trace(CPU_TRACE, name="cpu").run_id
    bad = root / "20261129-120000-bad-dead"
    bad.mkdir()
    (bad / "meta.json").write_text("{ not json")
    return store, {"h64": h64, "h2048": h2048, "a64": a64, "imp": imp}


def test_runs_are_grouped_by_machine_unknown_last(two_machines):
    store, ids = two_machines
    groups = [(m.label, sorted(r.run_id for r in rs)) for m, rs in group_by_machine(store.list())]
    assert groups[-1] == ("unknown machine", [ids["imp"]])
    assert sorted(groups[:-1]) == [("NVIDIA A100-SXM4-80GB on lab", [ids["a64"]]),
                                   ("NVIDIA H200 on vm", sorted([ids["h64"], ids["h2048"]]))]
    table = machines_table(store.list())
    assert table.set_index("machine")["runs"].to_dict() == {"NVIDIA A100-SXM4-80GB on lab": 1,
                                                            "NVIDIA H200 on vm": 2, "unknown machine": 1}


def test_the_same_config_is_matched_across_machines_and_only_it(two_machines):
    store, ids = two_machines
    [match] = match_configs(store.list())
    assert match.name == ExperimentConfig.from_dict(meta("sweep_64_warm_eager")["config"]).name
    assert {m.label: [r.run_id for r in rs] for m, rs in match.machines} == {
        "NVIDIA H200 on vm": [ids["h64"]], "NVIDIA A100-SXM4-80GB on lab": [ids["a64"]]}


def test_device_time_out_and_table_rows_are_not_compared_the_rest_is(tmp_path):
    root = tmp_path / "runs"
    cfg = meta("sweep_64_warm_eager")["config"]
    cpu = {"type": "cpu", "name": "AMD EPYC"}
    copy_h200_run(root, "sweep_64_warm_eager")
    copy_h200_run(root, "sweep_64_warm_eager", "-cpu", device=cpu,
                  config=dict(cfg, device="cpu", timeout_s=60.0, row_limit=5))
    assert len(match_configs(RunStore(root).list())) == 1
    for field, value in (("dtype", "fp32"), ("warmup", 3), ("active", 5), ("record_shapes", False)):
        root2 = tmp_path / field
        copy_h200_run(root2, "sweep_64_warm_eager")
        copy_h200_run(root2, "sweep_64_warm_eager", "-cpu", device=cpu, config=dict(cfg, **{field: value}))
        assert match_configs(RunStore(root2).list()) == [], field


# --- the comparison: an H200 run and a real CPU run of the same config ----------------------------------------------

CPU_PEAKS = {"fp32": 0.5, "bf16": 0.25}
CPU_REPEATS = 3


@pytest.fixture(scope="module")
def h200_and_cpu(tmp_path_factory):
    """The H200's 64 run and three real runs of its config on this machine's CPU."""
    from profiling_core import run_experiment
    root = tmp_path_factory.mktemp("h200_and_cpu") / "runs"
    h64 = copy_h200_run(root, "sweep_64_warm_eager")
    store = RunStore(root)
    cfg = ExperimentConfig.from_dict(dict(meta("sweep_64_warm_eager")["config"], device="cpu"))
    cpus = [run_experiment(cfg, store=store) for _ in range(CPU_REPEATS)]
    dev = cpus[0].meta["device"]
    PeakBook(root).save(DevicePeaks(
        device=dev["name"], kind="cpu", driver=None, torch_version=dev["torch"],
        measured_at="2026-12-02T00:00:00+00:00", method="by hand", gemm_tflops=CPU_PEAKS,
        gemm_tflops_median=CPU_PEAKS, gemm_sizes={"fp32": 1024, "bf16": 1024}, bandwidth_gbs=20.0,
        bandwidth_gbs_median=18.0, copy_bytes=16 << 20))
    return store, store.load(h64), cpus


def judged(store: RunStore, run: Run):
    with open_trace(run.trace_path, engine="sqlite") as tp:
        rep = analyze(tp, config=run.config)
        return run, rep, diagnose(tp, rep, run.config, PeakBook(store.root).for_run(run)), findings(rep, config=run.config)


def plain_cpu_step_median(path: Path) -> tuple[int, float]:
    """(ProfilerStep slices, the median duration of those after the first: the steady state's, which every per-step
    figure reads) of a trace, by a plain scan of its JSON."""
    evs = json.loads(path.read_text())["traceEvents"]
    steps = sorted((e for e in evs if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    return len(steps), statistics.median(e["dur"] for e in steady(steps))


def by_id(pairs) -> dict[str, str]:
    """{id: its titles in order, joined by " / "}: one run's verdicts, by hand."""
    out: dict[str, list[str]] = {}
    for i, title in pairs:
        out.setdefault(i, [])
        if title not in out[i]:
            out[i].append(title)
    return {i: " / ".join(v) for i, v in out.items()}


def expected_differences(per_machine: dict[str, list]) -> dict[tuple[str, str], tuple[dict, str]]:
    """{(kind, id): ({machine: its cell}, verdict)} by hand from each run's own findings and diagnoses: an id whose
    verdict is not the same on every run; a machine's cell its runs' one verdict, or how many gave each; the
    verdict ``differs`` when two machines with two runs or more each share no verdict on it, the one-run wording
    when two machines share none but one of them ran once, else ``varies between runs``."""
    out = {}
    for kind in ("finding", "diagnosis"):
        runs = {m: [by_id((f.id, f.title) for f in fs) if kind == "finding" else
                    by_id((d.rule, d.title) for d in dg.diagnoses) for _r, _p, dg, fs in items]
                for m, items in per_machine.items()}
        ids = {i for vs in runs.values() for v in vs for i in v}
        for i in ids:
            got = {m: [v.get(i, ABSENT) for v in vs] for m, vs in runs.items()}
            if len({g for gs in got.values() for g in gs}) == 1:
                continue
            cells = {}
            for m, gs in got.items():
                counts = {g: gs.count(g) for g in dict.fromkeys(gs)}
                cells[m] = gs[0] if len(counts) == 1 else "varies between runs: " + "; ".join(
                    f"{g} ({k} of {len(gs)})" for g, k in counts.items())
            gs = list(got.values())
            apart = [(len(a), len(b)) for j, a in enumerate(gs) for b in gs[j + 1:] if not set(a) & set(b)]
            out[(kind, i)] = (cells, "varies between runs" if not apart else "differs" if any(
                na >= 2 and nb >= 2 for na, nb in apart) else "one run: differs between the runs, spread unknown")
    return out


def differences_of(cmp) -> dict[tuple[str, str], tuple[dict, str]]:
    machines = [c for c in cmp.differences.columns if c not in ("kind", "id", "verdict")]
    return {(r["kind"], r["id"]): ({m: r[m] for m in machines}, r["verdict"]) for _, r in cmp.differences.iterrows()}


@pytest.mark.slow
def test_one_config_on_an_h200_and_repeated_on_a_cpu(h200_and_cpu):
    store, h200, cpus = h200_and_cpu
    [match] = match_configs(store.list())
    per = {m.label: [r.run_id for r in rs] for m, rs in match.machines}
    cpu_label = machine_of(cpus[0]).label
    assert per == {"NVIDIA H200 on vm": [h200.run_id], cpu_label: per[cpu_label]}
    assert sorted(per[cpu_label]) == sorted(r.run_id for r in cpus)
    judged_runs = {m.label: [judged(store, r) for r in rs] for m, rs in match.machines}
    cmp = machine_comparison([item for items in judged_runs.values() for item in items])
    assert list(cmp.table.columns) == MACHINE_COMPARISON_COLUMNS
    t = cmp.table.set_index("machine")
    gpu_row, cpu_row = t.loc["NVIDIA H200 on vm"], t.loc[cpu_label]

    want = plain_step_medians("sweep_64_warm_eager")  # a plain scan of the H200 trace's JSON
    assert (gpu_row["n"], gpu_row["run_ids"]) == (1, h200.run_id)
    assert gpu_row["cpu_us_per_step"] == pytest.approx(want["cpu"], abs=TOL)
    assert gpu_row["gpu_busy_us_per_step"] == pytest.approx(want["busy"], abs=TOL)
    assert math.isnan(gpu_row["cpu_us_per_step_spread_pct"])  # one run: no spread

    scans = [plain_cpu_step_median(r.trace_path) for r in cpus]  # each CPU run's trace, scanned by hand
    assert [n for n, _ in scans] == [10] * CPU_REPEATS
    meds = [m for _, m in scans]
    mid, lo, hi = statistics.median(meds), min(meds), max(meds)
    assert cpu_row["n"] == CPU_REPEATS and cpu_row["steps"] == 10
    assert cpu_row["cpu_us_per_step"] == pytest.approx(mid, abs=TOL)
    assert (cpu_row["cpu_us_per_step_min"], cpu_row["cpu_us_per_step_max"]) == (
        pytest.approx(lo, abs=TOL), pytest.approx(hi, abs=TOL))
    assert cpu_row["cpu_us_per_step_spread_pct"] == pytest.approx((hi - lo) / mid * 100, abs=0.01)
    assert all(v != v for v in (cpu_row["gpu_busy_us_per_step"], cpu_row["gpu_busy_us_per_step_max"]))  # (no GPU)

    # each against its own device's peak: the H200's datasheet bf16 figure, the CPU's calibration saved above
    assert (gpu_row["gemm_dtype"], gpu_row["peak_source"]) == ("bf16", "datasheet")
    assert gpu_row["compute_peak"] == DATASHEETS["H200"]["tflops"]["bf16"]
    assert (cpu_row["gemm_dtype"], cpu_row["peak_source"], cpu_row["compute_peak"]) == ("bf16", "measured", 0.25)
    for _, row in cmp.runs.iterrows():
        assert row["peak"] <= row["compute_peak"]
        assert row["fraction_of_peak"] == pytest.approx(row["tflops"] / row["peak"], rel=1e-6)

    # one H200 run: its spread is unknown, so no gap is called a difference, however large
    assert len(cmp.gaps) and set(cmp.gaps["verdict"]) == {"one run: spread unknown"}
    noisy = (hi - lo) / mid * 100 > 20
    said = [w for w in comparison_warnings(cmp.table, ["machine"]) if "spread by more than" in w]
    assert bool(said) == noisy and all(cpu_label in w for w in said)

    # what differs: by hand, from each run's own findings and diagnoses
    expected = expected_differences(judged_runs)
    assert differences_of(cmp) == expected
    # the CPU has no GPU lane on any of its runs, the H200 has one on its one run: one run cannot tell that apart
    # from run-to-run variation
    assert expected[("finding", "q4.offset")][1] == "one run: differs between the runs, spread unknown"


# --- repeated runs, from the H200's traces: each run's figures from a plain scan ------------------------------------

A100 = dict(meta("sweep_64_warm_eager")["device"], name="NVIDIA A100-SXM4-80GB")
CONFIG = meta("sweep_64_warm_eager")["config"]


def runs_of_one_config(root: Path, machines: dict[str, list[str]]) -> RunStore:
    """For each machine (``h200`` or ``a100``) runs of the config of ``sweep_64_warm_eager`` whose traces are those
    of the H200 runs named: real traces, each with its own timings, as the runs of one config on one machine."""
    for machine, names in machines.items():
        for i, name in enumerate(names):
            changes = dict(config=CONFIG, started_at=f"2026-11-30T10:{i:02d}:00+00:00")
            if machine == "a100":
                changes.update(host={"hostname": "lab"}, device=A100)
            copy_h200_run(root, name, f"-{machine}{i}", **changes)
    return RunStore(root)


def spread_of(names: list[str], what: str) -> tuple[float, float, float]:
    vals = [plain_step_medians(n)[what] for n in names]
    return statistics.median(vals), min(vals), max(vals)


H200_RUNS = ["sweep_64_warm_eager", "coldwarm_64_warm_eager", "spine_64_warm_eager_b8"]
A100_RUNS = ["sweep_8192_warm_eager", "variance_8192_warm_eager_a20"]


def test_a_gap_counts_only_beyond_both_machines_spread(tmp_path):
    store = runs_of_one_config(tmp_path / "runs", {"h200": H200_RUNS, "a100": A100_RUNS})
    [match] = match_configs(store.list())
    per = {m.label: [judged(store, r) for r in rs] for m, rs in match.machines}
    cmp = machine_comparison(per["NVIDIA H200 on vm"] + per["NVIDIA A100-SXM4-80GB on lab"])
    t = cmp.table.set_index("machine")
    assert t["n"].to_dict() == {"NVIDIA H200 on vm": 3, "NVIDIA A100-SXM4-80GB on lab": 2}
    gaps = cmp.gaps.set_index("value")
    for what, col in (("cpu", "cpu_us_per_step"), ("busy", "gpu_busy_us_per_step")):
        (ma, la, ha), (mb, lb, hb) = spread_of(H200_RUNS, what), spread_of(A100_RUNS, what)
        assert t.loc["NVIDIA H200 on vm", col] == pytest.approx(ma, abs=TOL)
        assert (t.loc["NVIDIA H200 on vm", f"{col}_min"], t.loc["NVIDIA H200 on vm", f"{col}_max"]) == (
            pytest.approx(la, abs=TOL), pytest.approx(ha, abs=TOL))
        assert t.loc["NVIDIA A100-SXM4-80GB on lab", col] == pytest.approx(mb, abs=TOL)
        g = gaps.loc[col]
        assert (g["machine_a"], g["machine_b"]) == ("NVIDIA H200 on vm", "NVIDIA A100-SXM4-80GB on lab")
        assert (g["gap"], g["spread_a"], g["spread_b"]) == (pytest.approx(abs(mb - ma), abs=2 * TOL),
                                                            pytest.approx(ha - la, abs=2 * TOL),
                                                            pytest.approx(hb - lb, abs=2 * TOL))
    # by hand (each run's median over its steps after the first): the CPU medians are 180.5 µs (74.7–187.9) and
    # 71.2 µs (60.8–81.7): a gap of 109.3 µs, inside the H200 runs' own 113.2 µs; the GPU busy medians 3.55 µs
    # (3.02–3.55) and 1524.5 µs (1523.9–1525.0): a gap of some 1521 µs, beyond both spreads (0.53 and 1.11 µs)
    assert gaps.loc["cpu_us_per_step", "verdict"] == "too noisy to tell"
    assert gaps.loc["gpu_busy_us_per_step", "verdict"] == "differs"
    assert differences_of(cmp) == expected_differences(per)


def test_a_verdict_some_runs_of_a_machine_give_varies_between_runs(tmp_path):
    """One machine ran the config twice, once with the 64 run's trace and once with the 8192 run's: its bound is
    not one verdict, and it is no difference from the machine whose run agrees with one of them."""
    store = runs_of_one_config(tmp_path / "runs", {"h200": ["sweep_64_warm_eager"],
                                                   "a100": ["sweep_8192_warm_eager", "sweep_64_warm_eager"]})
    [match] = match_configs(store.list())
    per = {m.label: [judged(store, r) for r in rs] for m, rs in match.machines}
    h200 = per["NVIDIA H200 on vm"]
    a100 = sorted(per["NVIDIA A100-SXM4-80GB on lab"], key=lambda item: item[0].meta["started_at"])  # 8192's first
    assert [r.run_id.rsplit("-", 1)[1] for r, *_ in a100] == ["a1000", "a1001"]
    cmp = machine_comparison(h200 + a100)  # runs in the order given: the A100's 8192 run first
    bounds = [next(f for f in fs if f.id == "q2.bound") for _r, _p, _d, fs in h200 + a100]
    b64, b8192 = bounds[0].evidence["bound"], bounds[1].evidence["bound"]
    assert b64 != b8192 and bounds[2].evidence["bound"] == b64
    t = cmp.table.set_index("machine")
    assert t.loc["NVIDIA H200 on vm", "bound"] == b64
    assert t.loc["NVIDIA A100-SXM4-80GB on lab", "bound"] == f"varies between runs: {b8192} (1 of 2); {b64} (1 of 2)"
    cells, verdict = differences_of(cmp)[("finding", "q2.bound")]
    assert verdict == "varies between runs"
    assert cells == {"NVIDIA H200 on vm": bounds[0].title,
                     "NVIDIA A100-SXM4-80GB on lab": f"varies between runs: {bounds[1].title} (1 of 2); "
                                                     f"{bounds[0].title} (1 of 2)"}
    assert set(cmp.gaps["verdict"]) == {"one run: spread unknown"}  # the H200 ran it once
    assert differences_of(cmp) == expected_differences({"NVIDIA H200 on vm": h200,
                                                        "NVIDIA A100-SXM4-80GB on lab": a100})


@pytest.mark.parametrize("h200_runs,a100_runs,said", [
    (["sweep_64_warm_eager"], ["sweep_8192_warm_eager"], "one run: differs between the runs, spread unknown"),
    (["sweep_64_warm_eager"], ["sweep_8192_warm_eager", "variance_8192_warm_eager_a20"],
     "one run: differs between the runs, spread unknown"),
    (["sweep_64_warm_eager", "coldwarm_64_warm_eager"], ["sweep_8192_warm_eager", "variance_8192_warm_eager_a20"],
     "differs")])
def test_a_verdict_is_a_machine_difference_only_with_two_runs_on_each(tmp_path, h200_runs, a100_runs, said):
    """The 64 runs are overhead-bound and the 8192 runs compute-bound (each run's own q2 finding): with one run on
    a machine that cannot be told from run-to-run variation, as a gap with one run cannot."""
    store = runs_of_one_config(tmp_path / "runs", {"h200": h200_runs, "a100": a100_runs})
    [match] = match_configs(store.list())
    per = {m.label: [judged(store, r) for r in rs] for m, rs in match.machines}
    h200, a100 = per["NVIDIA H200 on vm"], per["NVIDIA A100-SXM4-80GB on lab"]
    titles = {m: {next(f.title for f in fs if f.id == "q2.bound") for _r, _p, _d, fs in items}
              for m, items in per.items()}
    assert len(titles["NVIDIA H200 on vm"]) == len(titles["NVIDIA A100-SXM4-80GB on lab"]) == 1
    assert not titles["NVIDIA H200 on vm"] & titles["NVIDIA A100-SXM4-80GB on lab"]
    cmp = machine_comparison(h200 + a100)
    cells, verdict = differences_of(cmp)[("finding", "q2.bound")]
    assert cells == {m: t.pop() for m, t in titles.items()}
    assert verdict == said
    if min(len(h200_runs), len(a100_runs)) < 2:
        assert set(cmp.gaps["verdict"]) == {"one run: spread unknown"}
    assert differences_of(cmp) == expected_differences(per)


def test_two_machines_that_share_a_label_stay_two_columns():
    a = run_with({"source": "experiment", "host": {"hostname": "b"}, "device": {"name": "A", "type": "cuda"}})
    b = run_with({"source": "experiment", "host": {"hostname": None}, "device": {"name": "A on b", "type": "cuda"}})
    assert machine_of(a).label == machine_of(b).label and machine_of(a).key != machine_of(b).key
    assert machine_labels([a, b, a]) == ["A on b", "A on b · 2", "A on b"]


# --- importing another store ----------------------------------------------------------------------------------------

def test_a_store_is_imported_with_its_machines_and_only_once(two_machines, tmp_path):
    src, ids = two_machines
    dest = RunStore(tmp_path / "dest")
    result = dest.import_store(src.root)
    sound = [r for r in src.list() if r.problem is None]
    assert sorted(r.meta["imported_from"]["run_id"] for r in result.runs) == sorted(r.run_id for r in sound)
    assert [(f, why[:9]) for f, why in result.skipped] == [("20261129-120000-bad-dead", "meta.json")]
    before = {r.run_id: machine_of(r).label for r in sound}
    after = {r.meta["imported_from"]["run_id"]: machine_of(r).label for r in dest.list()}
    assert after == before
    assert len(match_configs(dest.list())) == 1  # the imported runs take part in the comparison
    again = dest.import_store(src.root)
    assert again.runs == [] and sorted(f for f, _ in again.skipped) == sorted(
        [r.run_id for r in sound] + ["20261129-120000-bad-dead"])
    assert all("already in this store" in why for f, why in again.skipped if f != "20261129-120000-bad-dead")
    # each named by the id it has in this store, which show and rm take (the source's own id is not one of them)
    here = {r.meta["imported_from"]["run_id"]: r.run_id for r in dest.list()}
    for folder, why in again.skipped:
        if folder != "20261129-120000-bad-dead":
            assert why == f"already in this store (run id {here[folder]})" and here[folder] != folder
            dest.load(here[folder])


def test_broken_runs_are_skipped_with_their_reason(tmp_path):
    root = tmp_path / "src"
    good = copy_h200_run(root, "sweep_64_warm_eager")
    no_trace = copy_h200_run(root, "sweep_2048_warm_eager")
    (root / no_trace / "trace.json").unlink()
    not_json = copy_h200_run(root, "sweep_4096_warm_eager")
    (root / not_json / "trace.json").write_text("{ this is not json")
    linked = copy_h200_run(root, "sweep_8192_warm_eager")
    (root / linked / "table.txt").unlink()
    (root / linked / "table.txt").symlink_to("/etc/passwd")
    result = RunStore(tmp_path / "dest").import_store(root)
    assert [r.meta["imported_from"]["run_id"] for r in result.runs] == [good]
    why = dict(result.skipped)
    assert why[no_trace] == "no trace.json or trace.json.gz"
    assert "JSON" in why[not_json] or "json" in why[not_json]
    assert why[linked] == "table.txt is not a regular file: it is a symbolic link"


def test_links_and_files_over_their_caps_are_skipped_by_name(tmp_path):
    root = tmp_path / "src"
    good = copy_h200_run(root, "sweep_64_warm_eager")
    meta_link = copy_h200_run(root, "sweep_2048_warm_eager")
    (root / meta_link / "meta.json").rename(root / "meta-elsewhere.json")
    (root / meta_link / "meta.json").symlink_to(root / "meta-elsewhere.json")
    trace_link = copy_h200_run(root, "sweep_4096_warm_eager")
    (root / trace_link / "trace.json").rename(root / "trace-elsewhere.json")
    (root / trace_link / "trace.json").symlink_to(root / "trace-elsewhere.json")
    big = copy_h200_run(root, "sweep_8192_warm_eager")
    cap = (APP / "sweep_64_warm_eager.json").stat().st_size  # the 64 run's trace fits, the 8192 run's does not
    assert (APP / "sweep_8192_warm_eager.json").stat().st_size > cap
    result = RunStore(tmp_path / "dest").import_store(root, max_bytes=cap)
    assert [r.meta["imported_from"]["run_id"] for r in result.runs] == [good]
    why = dict(result.skipped)
    assert why[meta_link] == "meta.json is not a regular file: it is a symbolic link"
    assert why[trace_link] == "trace.json is not a regular file: it is a symbolic link"
    assert why[big].startswith("trace.json is over ")


@pytest.mark.parametrize("first, then, lands", [("good", "garbage", True), ("garbage", "good", False)])
def test_what_lands_is_what_was_checked_whatever_the_source_becomes(tmp_path, monkeypatch, first, then, lands):
    """The source's trace is replaced the moment the loader's check begins (after the import read it): the check
    sees the bytes that were read, and the run that lands holds those bytes or nothing."""
    import profiling_core.trace as trace_mod
    good = (APP / "sweep_64_warm_eager.json").read_bytes()
    content = {"good": good, "garbage": b"{ this is not json"}
    root = tmp_path / "src"
    rid = copy_h200_run(root, "sweep_64_warm_eager")
    source = root / rid / "trace.json"
    source.write_bytes(content[first])
    real, checked = trace_mod.open_trace, []

    def swapping(path, *args, **kwargs):
        source.write_bytes(content[then])  # the file swapped between the import's read and its check
        checked.append(Path(path).read_bytes())
        return real(path, *args, **kwargs)

    monkeypatch.setattr(trace_mod, "open_trace", swapping)
    dest = RunStore(tmp_path / "dest")
    result = dest.import_store(root)
    assert checked == [content[first]]  # the check read the bytes the import had read, not the swapped file
    if lands:
        [run] = result.runs
        assert run.trace_path.read_bytes() == content[first] == checked[0]
    else:
        assert result.runs == [] and dest.list() == []
        assert "JSON" in dict(result.skipped)[rid] or "json" in dict(result.skipped)[rid]


def tarball(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def test_a_tarball_of_a_store_is_imported(two_machines, tmp_path):
    src, ids = two_machines
    archive = tmp_path / "runs.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src.root, arcname="runs")  # as `tar czf runs.tgz runs` makes it
    result = RunStore(tmp_path / "dest").import_store(archive)
    assert sorted(r.meta["imported_from"]["run_id"] for r in result.runs) == sorted(
        [ids["h64"], ids["h2048"], ids["a64"], ids["imp"]])
    assert all(r.meta["imported_from"]["store"] == str(archive) for r in result.runs)


def test_a_tarball_says_what_it_skipped_as_the_folder_does(two_machines, tmp_path):
    """Folders that hold no run's file (a run id's folder without meta.json, an empty one, one that is no run) are
    listed as skipped, with the same reasons, whether the store comes as a folder or as its archive."""
    src, _ids = two_machines
    (src.root / "20261129-130000-lost-beef").mkdir()
    (src.root / "20261129-130000-lost-beef" / "notes.txt").write_text("meta.json went missing")
    (src.root / "20261129-140000-empty-cafe").mkdir()
    (src.root / "notes").mkdir()
    (src.root / "notes" / "readme.txt").write_text("not a run")
    archive = tmp_path / "runs.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src.root, arcname="runs")
    from_folder = RunStore(tmp_path / "a").import_store(src.root)
    from_archive = RunStore(tmp_path / "b").import_store(archive)
    assert sorted(from_archive.skipped) == sorted(from_folder.skipped)
    assert sorted(dict(from_archive.skipped)) == ["20261129-120000-bad-dead", "20261129-130000-lost-beef",
                                                  "20261129-140000-empty-cafe", "notes"]
    assert len(from_archive.runs) == len(from_folder.runs) == 4


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info, None


GOOD_META = json.dumps(meta("sweep_64_warm_eager")).encode()
HOSTILE_MEMBERS = {
    "dot-dot": (_file("run1/../../escaped.json"), "'..'"),
    "absolute": (_file("/tmp/escaped-abs.json"), "absolute"),
    "symlink": (_special("run1/trace.json", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    "hardlink": (_special("run1/table.txt", tarfile.LNKTYPE, "/etc/passwd"), "hard link"),
    "device": (_special("run1/dev", tarfile.CHRTYPE), "device"),
    "fifo": (_special("run1/fifo", tarfile.FIFOTYPE), "FIFO"),
    "twice": (_file("run1/meta.json", GOOD_META), "appears twice"),
    "too big": (_file("run2/meta.json", b" " * (2**20 + 1)), "over the cap"),
}


@pytest.mark.parametrize("case", HOSTILE_MEMBERS)
def test_a_hostile_tarball_is_refused_whole(tmp_path, case):
    member, says = HOSTILE_MEMBERS[case]
    archive = tarball(tmp_path / "evil.tgz", [_file("run1/meta.json", GOOD_META),
                                             _file("run1/trace.json", (APP / "sweep_64_warm_eager.json").read_bytes()),
                                             member])
    dest = RunStore(tmp_path / "dest")
    with pytest.raises(RunStoreError) as err:
        dest.import_store(archive)
    assert says in str(err.value) and repr(member[0].name) in str(err.value)
    assert dest.list() == []
    assert not (tmp_path / "escaped.json").exists() and not Path("/tmp/escaped-abs.json").exists()


def test_what_is_not_a_store_is_refused_with_what_is_allowed(tmp_path):
    (tmp_path / "x.tgz").write_bytes(b"not a tarball")
    with pytest.raises(RunStoreError, match="not a folder or a tar archive"):
        RunStore(tmp_path / "dest").import_store(tmp_path / "x.tgz")
    with pytest.raises(RunStoreError, match="neither a folder nor a file"):
        RunStore(tmp_path / "dest").import_store(tmp_path / "missing")
    with pytest.raises(RunStoreError, match="is this run store"):
        RunStore(tmp_path / "dest").import_store(tmp_path / "dest")


def test_the_cli_imports_a_store(two_machines, tmp_path, capsys):
    from profiling_core.cli import main
    src, ids = two_machines
    assert main(["import-store", str(src.root), "--store", str(tmp_path / "dest"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["runs"]) == 4 and [s["folder"] for s in out["skipped"]] == ["20261129-120000-bad-dead"]
    assert main(["import-store", str(tmp_path / "missing"), "--store", str(tmp_path / "dest")]) == 2
    assert "neither a folder nor a file" in capsys.readouterr().err


def test_a_machine_s_one_figure_is_one_run_however_many_runs_it_has(tmp_path):
    """The H200 ran the config three times, but only one of its runs has a GEMM of known FLOPs (the others' roofline
    taken away: a trace without shapes): its TFLOP/s is one measurement, whose spread is unknown. The gap verdict
    counted the machine's runs (3) and read the one value as three runs that agree."""
    import dataclasses
    store = runs_of_one_config(tmp_path / "runs", {"h200": H200_RUNS, "a100": A100_RUNS})
    [match] = match_configs(store.list())
    per = {m.label: [judged(store, r) for r in rs] for m, rs in match.machines}
    h200 = per["NVIDIA H200 on vm"]
    blind = [(run, rep, dataclasses.replace(diag, roofline=diag.roofline.iloc[:0]), found)
             for run, rep, diag, found in h200[1:]]
    cmp = machine_comparison(h200[:1] + blind + per["NVIDIA A100-SXM4-80GB on lab"])
    runs = cmp.runs.set_index("run_id")
    assert runs["tflops"].notna().sum() == 1 + len(A100_RUNS)
    g = cmp.gaps.set_index("value").loc["tflops"]
    assert (g["n_a"], g["n_b"]) == (1, len(A100_RUNS)) and g["verdict"] == "one run: spread unknown"

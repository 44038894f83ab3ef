"""Long work in the background: a :class:`Job` per key, kept in ``st.session_state``, so that switching pages or
moving a display-only slider never starts it again and the Cancel button can reach it.

One job per key: while one runs under a key, a click that would start another starts nothing; the running job
counts it and its box (:func:`follow_job`) says so, next to its progress and Cancel button, and so does its outcome.
So the job under a key is the only one the click's page started, always shown and cancelled by that page's box.

Profiles, sweeps and calibrations each run in a fresh worker process behind the device lock
(``profiling_core.run``); ``start_*`` starts one, ``finish_*`` follows it and, once it ended, announces its runs and
says how it went.
"""
from __future__ import annotations

import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import streamlit as st

from profiling_core import ExperimentConfig
from profiling_core.present import md_code, md_text

from .cache import store
from .notices import show_notices
from .state import end_action


@dataclass
class Job:
    """Work running in a background thread, kept in session_state across reruns and page switches."""

    label: str
    cancel_event: threading.Event = field(default_factory=threading.Event)
    message: str = "starting ..."
    fraction: float = 0.0
    result: Any = None
    error: Optional[BaseException] = None
    error_text: str = ""
    started: float = field(default_factory=time.monotonic)
    finished: Optional[float] = None
    thread: Optional[threading.Thread] = None
    refused: int = 0
    """Clicks that would have started another job under this one's key while it ran: they started nothing."""

    @property
    def running(self) -> bool:
        return self.finished is None

    def cancel(self) -> None:
        self.cancel_event.set()
        self.message = "cancelling ..."

    def status(self, message: str) -> None:
        self.message = str(message)

    def progress(self, p: Any) -> None:
        self.fraction = float(getattr(p, "fraction", 0.0))
        self.message = str(getattr(p, "message", p))


def _jobs() -> dict:
    return st.session_state.setdefault("_jobs", {})


def start_job(key: str, label: str, fn: Callable[[Job], Any]) -> Job:
    """Run ``fn(job)`` in a background thread; ``fn`` reports through ``job.status`` / ``job.progress``.

    While a job runs under ``key``, nothing is started: the running job is returned and counts the refused click
    (``Job.refused``), which its box and its outcome tell."""
    running = get_job(key)
    if running is not None and running.running:
        running.refused += 1
        return running
    job = Job(label)

    def target():
        try:
            job.result = fn(job)
        except BaseException as exc:  # shown on the page, never raised into the server
            job.error = exc
            job.error_text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        finally:
            job.fraction = 1.0
            job.finished = time.monotonic()

    job.thread = threading.Thread(target=target, name=f"job-{key}", daemon=True)
    _jobs()[key] = job
    job.thread.start()
    return job


def get_job(key: str) -> Optional[Job]:
    return _jobs().get(key)


def pop_job(key: str) -> Optional[Job]:
    return _jobs().pop(key, None)


def follow_job(key: str, *, poll_s: float = 0.2) -> Optional[Job]:
    """If a job runs under ``key``: show its progress and a Cancel button until it ends; return it.

    Clicking anything reruns the page; the job keeps running in its thread and this picks it up again.
    """
    job = get_job(key)
    if job is None:
        return None
    if job.running:
        with st.container(border=True):
            if job.refused:
                st.warning(md_text(refused_text(job)), icon=":material/block:")
            st.button("Cancel", key=f"cancel_{key}", on_click=job.cancel, icon=":material/stop_circle:")
            bar = st.progress(0.0, text=md_text(f"{job.label}: {job.message}"))
            while job.running:
                elapsed = time.monotonic() - job.started
                bar.progress(min(max(job.fraction, 0.0), 1.0),
                             text=md_text(f"{job.label}: {job.message} ({elapsed:.0f} s)"))
                time.sleep(poll_s)
            bar.progress(1.0, text=md_text(f"{job.label}: {job.message}"))
    return job


def refused_text(job: Job) -> str:
    """What the clicks refused while ``job`` ran did: nothing (plain text)."""
    clicks = "1 more click" if job.refused == 1 else f"{job.refused} more clicks"
    return (f"{job.label} was already running, so {clicks} started nothing: one run at a time here. Wait for it to "
            f"end, or cancel it, then start another.")


def end_job(key: str, job: Job, run_ids: list[str], notices: list[tuple]) -> None:
    """The job under ``key`` ended (and was popped): announce its runs and what to tell, the clicks it refused with
    them (``state.end_action``; reruns the page)."""
    if job.refused:
        notices = [*notices, ("warning", md_text(refused_text(job)))]
    end_action(key, run_ids, notices)


def start_profile(key: str, config: ExperimentConfig, process: str = "fresh") -> Job:
    """Start one profile in the background (a worker process behind the device lock: a new one, or with
    ``process="persistent"`` the device's persistent worker for a warm eager run)."""
    from profiling_core import run_experiment

    def work(job: Job):
        return run_experiment(config, store=store(), on_status=job.status, cancel_event=job.cancel_event,
                              prestart=prestart(), process=process)

    return start_job(key, f"Profiling {config.name}", work)


def _ended(key: str) -> Job | None:
    """Show the notices under ``key`` and follow its job; the job, popped, once it has ended, else None."""
    show_notices(key)
    job = follow_job(key)
    if job is None or job.running:
        return None
    pop_job(key)
    return job


def finish_profile(key: str) -> None:
    """Follow the profile job under ``key``; when it ends, make its run current everywhere and say so (a toast that
    names it), or show why it failed; on the run after that, the outcome is shown once."""
    job = _ended(key)
    if job is None:
        return
    if job.error is not None:
        end_job(key, job, [], [("error", job.error, "The run failed")])
    end_job(key, job, [job.result.run_id], [("toast", f"Run {md_code(job.result.run_id, 200)} saved")])


def prestart() -> int:
    """1: fork runs from the prestarted worker (torch imported once, CUDA untouched); PROFILING_PRESTART=0
    starts a fresh interpreter per run instead."""
    return 0 if os.environ.get("PROFILING_PRESTART") == "0" else 1


def start_sweep(key: str, configs: list[ExperimentConfig], label: str, executor: Optional[dict] = None) -> Job:
    """Run ``configs`` one fresh worker each in the background; progress and cancel through the job. ``executor``:
    where they run (``form.executor_control``'s choice; default this machine), checked here before any job starts:
    what the sweep cannot run with raises ConfigError (the page says it under its form and keeps what was typed)."""
    from profiling_core import run_sweep
    from profiling_core.run import check_executor

    options = dict(executor or {"executor": "local"})
    check_executor(**options)
    if options["executor"] == "ray":
        label += " on " + ("a local Ray instance" if options.get("ray_address") == "local"
                           else f"the Ray cluster at {options.get('ray_address')}")

    def work(job: Job):
        return run_sweep(configs, store=store(), on_progress=job.progress, cancel_event=job.cancel_event,
                         prestart=prestart(), **options,
                         on_status=lambda m: setattr(job, "message", f"{job.message.split(' · ')[0]} · {m}"))

    return start_job(key, label, work)


def finish_sweep(key: str, state_key: str) -> None:
    """Follow the sweep job under ``key``; when it ends, keep its run ids in ``st.session_state[state_key]``, announce
    them (every run picker then shows them) and say how it went, once, on the run after that."""
    job = _ended(key)
    if job is None:
        return
    if job.error is not None:
        end_job(key, job, [], [("error", job.error, "The sweep failed")])
    res = job.result
    st.session_state[state_key] = [r.run_id for r in res.runs]
    msg = f"{len(res.runs)} run(s) in {res.wall_s:.1f} s"
    notices = [("error", exc, f"{cfg.name} failed") for cfg, exc in res.errors]
    notices.append(("warning", "Cancelled after " + msg) if res.cancelled else ("success", "Done: " + msg))
    end_job(key, job, [r.run_id for r in res.runs], notices)


def start_calibration(key: str, device: str) -> Job:
    """Measure the device's peaks in the background (a worker behind the device lock, like a run)."""
    from profiling_core.run import CalibrationJob
    from profiling_core import calibrate

    def work(job: Job):
        return calibrate(CalibrationJob(device=device), store=store(), on_status=job.status,
                         cancel_event=job.cancel_event, prestart=prestart())

    return start_job(key, f"Calibrating ({device})", work)


def finish_calibration(key: str) -> None:
    """Follow the calibration job under ``key``; when it ends, say what it measured or why it failed, once, on the run
    after that."""
    job = _ended(key)
    if job is None:
        return
    if job.error is not None:
        end_job(key, job, [], [("error", job.error, "The calibration failed")])
    end_job(key, job, [], [("success", "Measured the peaks of " + md_text(job.result.device))])

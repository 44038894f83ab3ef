"""The run store: one folder per run under a root, written atomically.

Layout::

    <root>/<run_id>/trace.json      Chrome/Kineto trace (trace.json.gz for gzip imports)
    <root>/<run_id>/table.txt       profiler table (key_averages().table)
    <root>/<run_id>/meta.json       config, versions, device, host, timings, peak memory, status
    <root>/<run_id>/worker.log      the worker's stderr
    <root>/<run_id>/memory_categories.json   torch's memory by category (runs with profile_memory, record_shapes
                                    and with_stack; ``memory_categories``)
    <root>/.staging/<run_id>/       a run being written (never listed); its ``.owner`` file is flock'd by the
                                    process writing it and that process's worker while either lives
    <root>/.trash/                  a run being deleted (never listed)
    <root>/.calibrations/           the devices' measured peaks (``peaks.PeakBook``; never listed as runs)

A run becomes visible only by ``os.rename`` of its complete staging folder, so a crash, a kill or a write
error leaves no half run; the staging folder a killed process leaves is removed on the next open of the
store, once its owner lock is free (its writer provably gone).  Run ids are plain names (letters, digits,
``._-``) checked before any path is built, so nothing can escape the root.

One bad folder never breaks the store: a run whose meta.json cannot be used (missing, not a regular file, empty,
over ``META_MAX_BYTES``, not a JSON object, nested deeper than ``META_MAX_DEPTH``, or a field the listings read
with the wrong type or out of its range) is listed with status ``"corrupt"`` and the reason in ``Run.problem``; it
can be deleted like any other.  Every small file of a run is read through ``files.read_small_file``, which looks at
what the path is first (a directory, a FIFO or a link to ``/dev/zero`` is refused, not opened or read).  An import is read through the trace loader first and refused, with the loader's reason, when the
loader cannot read it, so every run the store takes in is one the analyses can open.

The root is ``./runs`` unless ``PROFILING_RUNS_DIR`` or an explicit root says otherwise.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Mapping, Optional

import msgspec

from ..config import ExperimentConfig
from ..errors import ConfigError, InvalidRunIdError, RunNotFoundError, RunStoreError, TraceError, TraceTooLargeError
from ..units import human_bytes
from .files import _repaired, read_json_object, read_small_file

ENV_ROOT = "PROFILING_RUNS_DIR"
DEFAULT_ROOT = "runs"
META_FILE = "meta.json"
TRACE_FILE = "trace.json"
TRACE_GZ_FILE = "trace.json.gz"
TABLE_FILE = "table.txt"
MEMORY_CATEGORIES_FILE = "memory_categories.json"
RUN_FILES = (TRACE_FILE, TRACE_GZ_FILE, TABLE_FILE, MEMORY_CATEGORIES_FILE)
"""The artifacts of a run that travel between stores (``import_run``): its trace, table and memory categories."""
OWNER_FILE = ".owner"
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,159}")  # used with fullmatch: '$' would accept a final '\n'
META_MAX_BYTES = 2**20  # a run's meta.json is a few KiB
META_MAX_DEPTH = 32  # a run's meta.json nests 2 levels (the object, its config)
TABLE_MAX_BYTES = 16 * 2**20  # torch's table of a run is some KiB; of a large model some hundred
MEMORY_CATEGORIES_MAX_BYTES = 64 * 2**20  # memory.MAX_BYTES, the reader's own cap
STORE_IMPORT_TRACES = 8  # an archive of a store: every member's size, added up, at most this many traces' cap
STORE_IMPORT_MAX_MEMBERS = 100_000  # an archive of a store: its members (a run has 3 to 5 files)
CALIBRATIONS_DIR = ".calibrations"


def default_root() -> Path:
    return Path(os.environ.get(ENV_ROOT) or DEFAULT_ROOT)


def validate_run_id(run_id: object) -> str:
    """Return run_id if it is a plain name; raise InvalidRunIdError otherwise."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        raise InvalidRunIdError(
            f"run id must be 1-160 letters, digits, '.', '_' or '-' (starting with a letter or digit, "
            f"no '..'), got {run_id!r}")
    return run_id


def _slug(text: str) -> str:
    """A run id's name part: letters, digits, '_', '.' and '-', at most 80 characters, never '..' (a run of dots is
    one: ``resnet50..bf16`` is ``resnet50.bf16``), which :func:`validate_run_id` refuses."""
    s = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "-", text)).strip("-.")
    return (s or "trace")[:80]


def new_run_id(name: str) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return validate_run_id(f"{stamp}-{_slug(name)}-{secrets.token_hex(2)}")


@dataclass
class Run:
    """One complete run in the store."""

    run_id: str
    run_dir: Path
    meta: dict = field(default_factory=dict)

    @property
    def trace_path(self) -> Path:
        gz = self.run_dir / TRACE_GZ_FILE
        return gz if gz.exists() else self.run_dir / TRACE_FILE

    @property
    def table_path(self) -> Path:
        return self.run_dir / TABLE_FILE

    @property
    def meta_path(self) -> Path:
        return self.run_dir / META_FILE

    @property
    def name(self) -> str:
        return self.meta.get("name") or self.run_id

    @property
    def status(self) -> str:
        return self.meta.get("status", "unknown")

    @property
    def problem(self) -> Optional[str]:
        """Why the run's meta.json could not be used (its status is then ``"corrupt"``); None for a sound run."""
        if self.status != "corrupt":
            return None
        return self.meta.get("error") or "meta.json says the run is corrupt"

    @property
    def config(self) -> Optional[ExperimentConfig]:
        data = self.meta.get("config")
        if not data:
            return None
        try:
            return ExperimentConfig.from_dict(data)
        except ConfigError:
            return None

    @property
    def compute_capability(self) -> Optional[float]:
        """The GPU's compute capability from meta.json's device facts (``"9.0"`` reads 9.0); None where they give
        none (a CPU run, an imported trace) or it is not a number."""
        dev = self.meta.get("device") if isinstance(self.meta.get("device"), dict) else {}
        try:
            return float(dev.get("compute_capability"))
        except (TypeError, ValueError):
            return None

    @property
    def process_peak_bytes(self) -> Optional[int]:
        """The process's own peak of allocated device memory, meta.json's ``peak_device_memory_bytes``
        (``torch.cuda.max_memory_allocated()`` at the run's end: the whole process, warm-up included); None where it
        gives none (a CPU run, an imported trace) or it is not a whole number of bytes from 0."""
        pk = self.meta.get("peak_device_memory_bytes")
        return pk if type(pk) is int and pk >= 0 else None

    @property
    def compile_cache_reused(self) -> Optional[bool]:
        """Whether this compiled run's compile found its graph in a cache an earlier run filled (meta.json's
        ``compile_cache``: a warm run given the store's shared cache, and Inductor's FX graph or AOTAutograd cache
        hit): its warm-up then paid less than a compile from scratch.  False for a compiled run that compiled from
        an empty cache (every compiled run before the shared cache existed did); None for a run that compiled
        nothing or says nothing (an imported trace)."""
        cfg = self.meta.get("config") if isinstance(self.meta.get("config"), dict) else {}
        if self.meta.get("source") != "experiment" or cfg.get("compile", "off") == "off":
            return None
        cache = self.meta.get("compile_cache")
        if not isinstance(cache, dict):
            return False
        hits = [cache.get(k) for k in ("fx_graph_hits", "aot_autograd_hits")]
        return cache.get("kind") == "shared" and any(type(h) is int and h > 0 for h in hits)

    def table_text(self) -> str:
        """The profiler table torch printed (``table.txt``), bytes that are not UTF-8 read as U+FFFD; ``""`` for a run
        without one (an imported trace) or whose table.txt cannot be read (not a regular file, over
        ``TABLE_MAX_BYTES``)."""
        data, _why = read_small_file(self.table_path, TABLE_FILE, TABLE_MAX_BYTES)
        return "" if data is None else data.decode("utf-8", "replace")

    def to_dict(self) -> dict:
        d = {"run_id": self.run_id, "run_dir": str(self.run_dir), "trace_path": str(self.trace_path),
             "table_path": str(self.table_path), "status": self.status, "name": self.name}
        if self.problem is not None:
            d["error"] = self.problem
        return d


@dataclass
class StoreImport:
    """What :meth:`RunStore.import_store` did.

    Attributes:
        runs: the runs it imported, each under its new run id (its old one in ``meta["imported_from"]["run_id"]``).
        skipped: (the source's folder name, why it was not imported), one per run folder left out.
        calibrations: how many of the source's calibrations (``.calibrations/``) it added.
    """

    runs: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    calibrations: int = 0

    def to_dict(self) -> dict:
        return {"runs": [r.to_dict() for r in self.runs],
                "skipped": [{"folder": f, "reason": why} for f, why in self.skipped],
                "calibrations": self.calibrations}


class RunStore:
    """Folders of complete runs under ``root``."""

    def __init__(self, root: Optional[os.PathLike | str] = None):
        self.root = Path(root) if root is not None else default_root()
        self._owners: dict[Path, int] = {}  # staging folder -> its owner lock's descriptor, while we write it
        with contextlib.suppress(OSError):
            self.cleanup_staging()

    # --- paths -----------------------------------------------------------------------------------
    def _dir(self, run_id: str) -> Path:
        run_id = validate_run_id(run_id)
        path = (self.root / run_id)
        if not self._inside(path):
            raise InvalidRunIdError(f"run id {run_id!r} resolves outside the run store {self.root}")
        return path

    def _inside(self, path: Path) -> bool:
        """Whether ``path`` (a name in the store's folder) resolves to a folder of the store itself: a link to a
        folder elsewhere is no run of this store (``load`` and ``delete`` refuse it, ``list`` leaves it out)."""
        return path.resolve().parent == self.root.resolve()

    def _ensure(self) -> None:
        try:
            (self.root / ".staging").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunStoreError(f"cannot create the run store at {self.root}: {exc.strerror}") from None

    # --- writing ---------------------------------------------------------------------------------
    def _begin(self, name: str) -> tuple[str, Path]:
        """Reserve a run id and make its staging folder.  Pair with ``_commit`` or ``_abort``.

        Private: runs enter the store only through ``run_experiment``, ``import_trace`` and ``import_run``, which write the
        staging folder and commit it; nothing else should leave a run half made.
        """
        self._ensure()
        for _ in range(20):
            run_id = new_run_id(name)
            if not (self.root / run_id).exists():
                staging = self.root / ".staging" / run_id
                try:
                    staging.mkdir()
                except FileExistsError:
                    continue
                except OSError as exc:
                    raise RunStoreError(f"cannot write to the run store at {self.root}: {exc.strerror}") from None
                try:
                    self._owners[staging] = _own(staging)
                except OSError as exc:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise RunStoreError(f"cannot write to the run store at {self.root}: {exc.strerror}") from None
                return run_id, staging
        raise RunStoreError("could not reserve a unique run id")

    def _commit(self, run_id: str, staging: Path, meta: dict,
                before_meta: Optional[Callable[[dict], dict]] = None) -> Run:
        """fsync the staging folder's files, write meta.json (``before_meta(meta)`` first, when given: what it
        returns is written, so a caller can time the commit itself) and fsync it, then rename the folder into
        place (atomic)."""
        final = self._dir(run_id)
        meta = dict(meta, run_id=run_id)
        try:
            # not part of the run; its lock stays held through our descriptor until the rename is done (and a
            # cleanup leaves a young staging folder without one alone)
            (staging / OWNER_FILE).unlink(missing_ok=True)
            for child in staging.iterdir():
                if child.is_file():
                    with open(child, "rb") as f:
                        os.fsync(f.fileno())
            if before_meta is not None:
                meta = before_meta(meta)
            tmp = staging / (META_FILE + ".tmp")
            with open(tmp, "w") as f:
                json.dump(meta, f, indent=1, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, staging / META_FILE)
            os.rename(staging, final)
        except OSError as exc:
            self._abort(staging)
            raise RunStoreError(f"could not save run {run_id}: {exc.strerror or exc}") from None
        self._disown(staging)
        return Run(run_id, final, meta)

    def _abort(self, staging: Path) -> None:
        """Drop a staging folder (the run it was for never becomes visible)."""
        shutil.rmtree(staging, ignore_errors=True)
        self._disown(staging)

    def _owner_fd(self, staging: Path) -> int:
        """The descriptor of ``staging``'s owner lock: a worker that inherits it keeps the folder owned."""
        return self._owners[staging]

    def _disown(self, staging: Path) -> None:
        fd = self._owners.pop(staging, None)
        if fd is not None:
            os.close(fd)

    def cleanup_staging(self, older_than_s: float = 24 * 3600) -> int:
        """Remove staging folders whose writer is gone; done on every open of the store.

        A folder's writer is gone when its owner lock (``.owner``, flock'd by the writing process and by its
        worker) can be taken: the kernel drops an flock only when every process holding it has exited, so a
        live run, even one whose caller was killed while its worker still runs, is never removed.  A folder with
        no owner lock (made by an older version, or its writer killed between mkdir and lock) is removed once it
        is older than ``older_than_s``.
        """
        n = 0
        for p in (self.root / ".staging").glob("*"):
            try:
                fd = os.open(p / OWNER_FILE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except FileNotFoundError:
                fd = None
            except OSError:
                continue
            try:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: its writer lives
                elif time.time() - p.lstat().st_mtime <= older_than_s:
                    continue
                shutil.rmtree(p, ignore_errors=True)
                n += 1
            except OSError:
                pass
            finally:
                if fd is not None:
                    os.close(fd)
        return n

    # --- reading ---------------------------------------------------------------------------------
    def _read(self, path: Path) -> Run:
        meta, problem = _read_meta(path / META_FILE)
        if problem is not None:
            meta = {"name": path.name, "status": "corrupt", "error": problem}  # nothing of the bad file is kept
        return Run(path.name, path, meta)

    def __iter__(self) -> Iterator[Run]:
        return iter(self.list())

    def list(self) -> list[Run]:
        """Complete runs, newest first."""
        if not self.root.is_dir():
            return []
        runs = [self._read(p) for p in self.root.iterdir()
                if p.is_dir() and not p.name.startswith(".") and RUN_ID_RE.fullmatch(p.name) and self._inside(p)]
        return sorted(runs, key=lambda r: (str(r.meta.get("started_at", "")), r.run_id), reverse=True)

    def load(self, run_id: str) -> Run:
        path = self._dir(run_id)
        if not path.is_dir():
            raise RunNotFoundError(f"no run {run_id!r} in {self.root}")
        return self._read(path)

    def delete(self, run_id: str) -> None:
        path = self._dir(run_id)
        if not path.is_dir():
            raise RunNotFoundError(f"no run {run_id!r} in {self.root}")
        trash = self.root / ".trash"
        trash.mkdir(exist_ok=True)
        target = trash / f"{run_id}.{secrets.token_hex(3)}"
        os.rename(path, target)  # disappears from listings atomically
        shutil.rmtree(target, ignore_errors=True)

    def size_bytes(self) -> int:
        total = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for f in files:
                try:
                    total += os.path.getsize(os.path.join(dirpath, f))
                except OSError:
                    pass
        return total

    # --- import ----------------------------------------------------------------------------------
    def import_trace(self, source: os.PathLike | str, name: Optional[str] = None,
                     max_bytes: Optional[int] = None, filename: Optional[str] = None,
                     checked: Optional[Callable[[Run, Any], None]] = None) -> Run:
        """Copy an external Chrome/Kineto trace (.json or .json.gz) into the store as a run.

        The trace is first read by the loader every analysis uses (``open_trace``, the offline mirror): what it
        refuses (not JSON, truncated, no events list, NaN, over ``max_bytes`` decompressed (None: the loader's cap,
        ``trace.trace_cap``), ...) is refused here
        with its message (TraceError), and nothing is kept. ``filename`` is the file's name as the user knows it
        (an upload's own name, which may not fit a file name): it names the file in messages and is kept in
        meta.json as ``original_filename``; by default the source's name. ``checked``: called once the run has
        landed with the run and the session the check loaded (its ``path`` the run's trace), which it then owns
        (``open_trace(run.trace_path, loaded=session)`` opens the run without loading the file again); without it
        the session is closed.
        """
        from ..trace import trace_cap
        max_bytes = trace_cap(max_bytes)
        src = Path(source)
        shown = filename or src.name
        kept: list = []

        def check(path: Path, keep: bool = False) -> None:
            session = _check_trace(path, max_bytes, filename or os.fspath(src), keep=keep)
            if session is not None:
                kept.append(session)

        # (a file name's bytes that are not UTF-8 hold lone surrogates: kept as U+FFFD, as meta.json reads back)
        meta = _repaired({"name": name or shown, "status": "ok", "source": "import", "original_filename": shown,
                          "size_bytes": None, "started_at": datetime.now(timezone.utc).isoformat(),
                          "host": socket.gethostname(), "config": None})

        def fill(staging: Path) -> None:
            # The source is read once, into the staging folder, and the loader checks that copy: what lands is
            # exactly what was checked, whatever happens to the source meanwhile.
            try:
                f = open(src, "rb")
            except OSError as exc:
                raise RunStoreError(f"cannot read {shown}: {exc.strerror}") from None
            with f:
                size = os.fstat(f.fileno()).st_size
                if size > max_bytes:
                    check(src)  # the loader's own refusal of a file over the cap, before anything is copied
                head = f.read(2)
                dest = staging / (TRACE_GZ_FILE if head == b"\x1f\x8b" else TRACE_FILE)
                with open(dest, "xb") as out:
                    out.write(head)
                    # (within the cap: a device or a pipe, /dev/zero say, has no size to check before)
                    shutil.copyfileobj(_Capped(f, max_bytes - len(head), shown, max_bytes), out, 1 << 20)
            check(dest, keep=checked is not None)
            meta["size_bytes"] = dest.stat().st_size

        try:
            run = self._land(name or shown.removesuffix(".gz").removesuffix(".json"), meta, fill,
                             f"could not copy {shown} into the store")
        except BaseException:
            for session in kept:
                session.close()
            raise
        if checked is not None and kept:
            kept[0].path = os.fspath(run.trace_path)  # (it was loaded from the staged copy, now the run's trace)
            checked(run, kept[0])
        return run

    def import_run(self, files: Mapping[str, bytes], meta: dict) -> Run:
        """Land a run made in another store (another machine's, e.g. a cluster node's): its artifacts as bytes,
        keyed by their file names in a run folder (``RUN_FILES``: ``trace.json`` or ``trace.json.gz``, and
        ``table.txt``, ``memory_categories.json`` when it has them), and its meta.json as a dict. It gets a new
        run id here and lands as every run does, whole or not at all. A name outside ``RUN_FILES`` or a run without
        a trace is refused with RunStoreError, and nothing is kept."""
        if not isinstance(files, Mapping):
            raise RunStoreError(f"a run's files must be a mapping of file name to bytes, got {type(files).__name__}")
        for fname, data in files.items():
            if fname not in RUN_FILES:
                raise RunStoreError(f"a run's files are named {', '.join(RUN_FILES)}; got {fname!r}")
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise RunStoreError(f"{fname} must be bytes, got {type(data).__name__}")
        if (TRACE_FILE in files) == (TRACE_GZ_FILE in files):
            raise RunStoreError(f"a run has one trace, {TRACE_FILE} or {TRACE_GZ_FILE}; got "
                                f"{', '.join(map(repr, files)) or 'no files'}")

        def write(staging: Path) -> None:
            for fname, data in files.items():
                with open(staging / fname, "xb") as f:
                    f.write(data)

        meta = dict(meta)
        meta.pop("run_id", None)
        return self._land(str(meta.get("name") or "run"), meta, write, "could not write the run into the store")

    def import_store(self, source: os.PathLike | str, max_bytes: Optional[int] = None,
                     filename: Optional[str] = None) -> StoreImport:
        """Import every run of another run store (another machine's): its folder, or a ``.tar`` / ``.tar.gz`` (any
        compression ``tarfile`` reads) of it, whose run folders sit at the archive's top or inside one folder (as
        ``tar czf runs.tgz runs`` makes it).

        Each run folder lands through :meth:`import_run`, whole or not at all, under a new run id, with its meta.json
        as it was (its config, device and host: its machine, ``store.machines.machine_of``) and
        ``meta["imported_from"]``: the run id it had there, where it came from and when. The source's calibrations
        (``.calibrations/``, each checked against the calibration schema) are added where this store has none of
        that key, so imported runs are judged against their own device's measured peaks.

        A run folder is skipped, with the reason in :attr:`StoreImport.skipped`, when its meta.json cannot be used
        (the reasons ``RunStore.list`` gives), it has no trace or a trace the loader refuses (as
        :meth:`import_trace`: over ``max_bytes`` decompressed, not JSON, ...), a file of it is not a regular file
        (a link, a FIFO, a device) or is over its cap (meta.json 1 MiB, the trace ``max_bytes``, table.txt 16 MiB,
        memory_categories.json 64 MiB), or a run
        of that id is here already (its own id, or an import's ``imported_from``): importing a store twice adds
        nothing the second time. Hidden folders (``.staging``, ``.trash``) are never read. Each file of a run folder
        is read once, under its cap and without following a link; the loader checks those bytes and those bytes
        land, so a file replaced while the import runs cannot slip past the check.

        An archive is refused whole, with RunStoreError naming the member, when a member's path is absolute or
        holds ``..``, a member is a link (symbolic or hard), a device or a FIFO, a path appears twice, a run's file
        is over its cap, or the archive holds more than ``STORE_IMPORT_MAX_MEMBERS`` members or
        ``STORE_IMPORT_TRACES`` times the trace cap (its members' sizes, added up). Only the files of run folders and
        calibrations are extracted, into a private temporary folder, never by ``tarfile``'s own extraction.
        ``filename`` names the source in messages and in ``imported_from`` (an upload's name); by default its path.
        """
        from ..trace import trace_cap
        max_bytes = trace_cap(max_bytes)
        src = Path(source)
        shown = filename or str(src)
        try:
            same = src.resolve() == self.root.resolve()
        except OSError:
            same = False
        if same:
            raise RunStoreError(f"{shown} is this run store: there is nothing to import")
        if src.is_dir():
            return self._import_store_dir(src, shown, max_bytes)
        if not src.is_file():
            raise RunStoreError(f"{shown} is neither a folder nor a file: name a run store's folder, or a .tar or "
                                ".tar.gz of one")
        with tempfile.TemporaryDirectory(prefix="profiling_core-import-") as tmp:
            _extract_store_archive(src, Path(tmp), shown, max_bytes)
            root = Path(tmp)
            inside = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
            if len(inside) == 1 and not (inside[0] / META_FILE).exists() and not any(
                    (p / META_FILE).exists() for p in root.iterdir() if p.is_dir()):
                root = inside[0]  # `tar czf runs.tgz runs`: the store is the one folder inside
            return self._import_store_dir(root, shown, max_bytes)

    def _import_store_dir(self, src: Path, shown: str, max_bytes: int) -> StoreImport:
        """Each run folder's files are read once, under their caps and without following links
        (``read_small_file``); the trace's loader check (:func:`_trace_problem`) reads those bytes from a private
        copy, and :meth:`import_run` commits those same bytes. A file of ``src`` changed, replaced or turned into a
        link after it was read changes neither what was checked nor what lands."""
        from .peaks import PeakBook
        out = StoreImport()
        here = self.list()
        # {a source's run id: its id here}: a run of this store, or one imported before under an id of its own
        present = {r.run_id: r.run_id for r in here}
        present.update({str(r.meta["imported_from"].get("run_id")): r.run_id for r in here
                        if isinstance(r.meta.get("imported_from"), dict)})
        try:
            children = sorted(src.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            raise RunStoreError(f"cannot read {shown}: {exc.strerror}") from None
        caps = {TRACE_FILE: max_bytes, TRACE_GZ_FILE: max_bytes, TABLE_FILE: TABLE_MAX_BYTES,
                MEMORY_CATEGORIES_FILE: MEMORY_CATEGORIES_MAX_BYTES}
        for p in children:
            name = os.fsencode(p.name).decode("utf-8", "backslashreplace")
            if p.name.startswith("."):
                continue
            try:
                mode = p.lstat().st_mode
            except OSError:
                continue
            if not stat.S_ISDIR(mode):
                if stat.S_ISLNK(mode):
                    out.skipped.append((name, "a symbolic link, not a run folder"))
                continue  # a file beside the runs (a README) is not a run
            if not RUN_ID_RE.fullmatch(p.name) or ".." in p.name:
                out.skipped.append((name, "not a run folder: its name is not a run id"))
                continue
            if p.name in present:
                out.skipped.append((name, f"already in this store (run id {present[p.name]})"))
                continue
            meta, why = _read_meta(p / META_FILE, follow_symlinks=False)
            files: dict[str, bytes] = {}
            for fname, cap in caps.items():
                if why is not None:
                    break
                if not os.path.lexists(p / fname):
                    continue
                data, why = read_small_file(p / fname, fname, cap, follow_symlinks=False)
                if data is not None:
                    files[fname] = data
            if why is None and TRACE_FILE not in files and TRACE_GZ_FILE not in files:
                why = f"no {TRACE_FILE} or {TRACE_GZ_FILE}"
            if why is None:
                fname = TRACE_FILE if TRACE_FILE in files else TRACE_GZ_FILE
                why = _trace_problem(fname, files[fname], max_bytes)
            if why is not None:
                out.skipped.append((name, why))
                continue
            meta = dict(meta, imported_from={"run_id": p.name, "store": shown,
                                             "imported_at": datetime.now(timezone.utc).isoformat()})
            try:
                out.runs.append(self.import_run(files, meta))
            except RunStoreError as exc:
                out.skipped.append((name, str(exc)))
                continue
            present[p.name] = out.runs[-1].run_id
        mine = PeakBook(self.root)
        have = {c.key for c in mine.all()[0]}
        for c in PeakBook(src).all()[0]:
            if c.key not in have:
                try:
                    mine.save(c)
                except OSError as exc:
                    raise RunStoreError(f"could not save the calibration of {c.device}: {exc.strerror}") from None
                have.add(c.key)
                out.calibrations += 1
        return out

    def _land(self, name: str, meta: dict, fill: Callable[[Path], object], failure: str) -> Run:
        """The one way a run made outside a worker enters the store: a staging folder, ``fill(staging)`` writes
        its files, then the atomic commit; an OSError on the way leaves nothing (RunStoreError ``failure: why``)."""
        run_id, staging = self._begin(name)
        try:
            fill(staging)
        except OSError as exc:
            self._abort(staging)
            raise RunStoreError(f"{failure}: {exc.strerror or exc}") from None
        except BaseException:
            self._abort(staging)
            raise
        return self._commit(run_id, staging, meta)


class _Capped:
    """A file read through ``read(n)`` that raises TraceTooLargeError once more than ``left`` bytes came from it."""

    def __init__(self, f, left: int, shown: str, cap: int) -> None:
        self.f, self.left, self.shown, self.cap = f, left, shown, cap

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.left -= len(data)
        if self.left < 0:
            raise TraceTooLargeError(f"{self.shown} gave more than {human_bytes(self.cap)} (the import cap, "
                                     f"{self.cap} bytes); stopped reading it, and nothing was kept")
        return data


def _check_trace(path: Path, max_bytes: int, shown: str, keep: bool = False):
    """Raise what the loader every analysis uses (``open_trace``, the offline mirror) raises on the trace at
    ``path`` (over ``max_bytes`` decompressed, not JSON, ...), its message naming the trace ``shown``. With ``keep``,
    return the open session the check loaded (the caller closes it), else None."""
    from ..trace import open_trace  # the loader imports numpy and msgspec: only when importing
    try:
        session = open_trace(path, engine="sqlite", max_bytes=max_bytes)
    except TraceError as exc:
        raise type(exc)(str(exc).replace(os.fspath(path), shown)) from None
    if keep:
        return session
    session.close()
    return None


def _trace_problem(fname: str, data: bytes, max_bytes: int) -> Optional[str]:
    """Why the loader refuses these bytes of a trace named ``fname`` (:func:`_check_trace`), or None. The loader
    reads a path: the bytes are written to a file in a private temporary folder first, so what it checks is exactly
    ``data``, whatever happens to the file they were read from."""
    with tempfile.TemporaryDirectory(prefix="profiling_core-check-") as tmp:
        path = Path(tmp) / fname
        try:
            with open(path, "xb") as f:
                f.write(data)
        except OSError as exc:
            return f"{fname} could not be checked: {exc.strerror or exc}"
        try:
            _check_trace(path, max_bytes, fname)
        except TraceError as exc:
            return str(exc)
    return None


def _member_problem(m: tarfile.TarInfo) -> Optional[str]:
    """Why a member of a store's archive is refused, or None."""
    name = m.name
    parts = [x for x in name.replace("\\", "/").split("/") if x not in ("", ".")]
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "its path is absolute"
    if ".." in parts:
        return "its path holds '..'"
    if m.issym() or m.islnk():
        return f"it is a {'symbolic' if m.issym() else 'hard'} link (to {m.linkname!r})"
    if m.ischr() or m.isblk():
        return "it is a device"
    if m.isfifo():
        return "it is a FIFO"
    if not (m.isfile() or m.isdir()):
        return "it is neither a file nor a folder"
    return None


def _extract_store_archive(src: Path, dest: Path, shown: str, max_bytes: int) -> None:
    """Extract the run folders' files and the calibrations of a store's archive into ``dest`` (see
    ``RunStore.import_store`` for what is refused); RunStoreError names the member that was refused."""
    from .peaks import PeakBook
    caps = {META_FILE: META_MAX_BYTES, TRACE_FILE: max_bytes, TRACE_GZ_FILE: max_bytes, TABLE_FILE: TABLE_MAX_BYTES,
            MEMORY_CATEGORIES_FILE: MEMORY_CATEGORIES_MAX_BYTES}
    try:
        tf = tarfile.open(src, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise RunStoreError(f"{shown} is not a folder or a tar archive (.tar, .tar.gz) of a run store: {exc}"
                            ) from None
    with tf:
        members, total = [], 0
        try:
            for m in tf:
                why = _member_problem(m)
                if why is not None:
                    raise RunStoreError(f"{shown}: the member {m.name!r} is refused: {why}; an archive of a run "
                                        "store holds plain folders and files only")
                members.append(m)
                total += max(0, m.size)
                if len(members) > STORE_IMPORT_MAX_MEMBERS:
                    raise RunStoreError(f"{shown} holds more than {STORE_IMPORT_MAX_MEMBERS:,} members, the most an "
                                        "archive of a run store may hold")
                if total > STORE_IMPORT_TRACES * max_bytes:
                    raise RunStoreError(f"{shown} holds more than {STORE_IMPORT_TRACES * max_bytes:,} bytes, the most "
                                        f"an archive of a run store may hold ({STORE_IMPORT_TRACES} times the trace "
                                        "cap)")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise RunStoreError(f"{shown} is not a readable tar archive: {exc}") from None
        seen = set()
        for m in members:
            parts = [x for x in m.name.split("/") if x not in ("", ".")]
            # Every folder at a run's level is made, files or not, so the import lists what it skipped as the
            # folder import does ("meta.json is missing", "its name is not a run id"); hidden ones stay out.
            folders = (parts if m.isdir() else parts[:-1])[:2]
            if folders and not any(x.startswith(".") for x in folders):
                try:
                    dest.joinpath(*folders).mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise RunStoreError(f"could not unpack {shown}: {exc.strerror or exc}") from None
            if not m.isfile():
                continue
            key = "/".join(parts)
            if key in seen:
                raise RunStoreError(f"{shown}: the member {m.name!r} is refused: its path appears twice")
            seen.add(key)
            if len(parts) > 3 or len(parts) < 2:
                continue  # the files of runs are <run>/<file> or <store>/<run>/<file>
            fname, folder = parts[-1], parts[-2]
            if folder == CALIBRATIONS_DIR and fname.endswith(".json"):
                cap = PeakBook.MAX_BYTES
            elif fname in caps and not folder.startswith("."):
                cap = caps[fname]
            else:
                continue
            if m.size > cap:
                raise RunStoreError(f"{shown}: the member {m.name!r} is refused: it is {m.size:,} bytes, over the cap "
                                    f"of {cap:,} bytes for a {fname if folder != CALIBRATIONS_DIR else 'calibration'}")
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                f = tf.extractfile(m)
                with open(target, "xb") as out:
                    left = m.size
                    while left > 0 and f is not None:
                        chunk = f.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        out.write(chunk)
                        left -= len(chunk)
            except (tarfile.TarError, EOFError, zlib.error) as exc:
                raise RunStoreError(f"{shown} is not a readable tar archive: {exc}") from None
            except OSError as exc:
                raise RunStoreError(f"could not unpack {shown}: {exc.strerror or exc}") from None


def _own(staging: Path) -> int:
    """Make ``staging``'s owner lock, locked, and return its descriptor.  It is locked under a temporary name and
    renamed into place, so a cleanup never finds it unlocked while its writer lives."""
    tmp = staging / (OWNER_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()}\n".encode())  # for a person looking: who writes this folder
        os.replace(tmp, staging / OWNER_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd


# --- meta.json, read defensively -------------------------------------------------------------------

# The numbers the listings read, bounded: a count or a size (a JSON integer of 400 digits is one to Python), a
# duration in seconds or a load average (finite: JSON's NaN and 1e400 read as floats).
_Count = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
_Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
_Load = Annotated[float, msgspec.Meta(ge=0, le=1e6)]


class _DeviceMeta(msgspec.Struct):
    name: Optional[str] = None
    type: Optional[str] = None
    cpu_threads: Optional[_Count] = None


class _ConfigMeta(msgspec.Struct):  # the fields listings read as they are (Run.config checks the whole config)
    workload: Optional[str] = None
    size: Optional[_Count] = None
    dtype: Optional[str] = None
    compile: Optional[str] = None
    warmup: Optional[_Count] = None
    active: Optional[_Count] = None
    device: Optional[str] = None


class _TimingsMeta(msgspec.Struct):
    wall_s: Optional[_Seconds] = None
    warmup_s: Optional[_Seconds] = None  # (the Compile vs eager page's one-time compile: a difference of two)


class _LoadMeta(msgspec.Struct):
    cores: Optional[_Count] = None
    load_1min_before: Optional[_Load] = None
    load_1min_after: Optional[_Load] = None


class _Meta(msgspec.Struct):
    """The meta.json fields the store, the CLI and the pages read, with the types they read them as (others are
    kept as they are, unchecked)."""
    name: str = ""
    status: str = "unknown"
    source: str = ""
    started_at: str = ""
    original_filename: str = ""
    error: str = ""
    config: Optional[_ConfigMeta] = None
    device: Optional[_DeviceMeta] = None
    timings: Optional[_TimingsMeta] = None
    machine_load: Optional[_LoadMeta] = None


def _read_meta(path: Path, follow_symlinks: bool = True) -> tuple[dict, Optional[str]]:
    """``(meta, None)``, or ``({}, why)`` when the file at ``path`` cannot be used as a run's meta.json (a symbolic
    link where ``follow_symlinks`` is false)."""
    meta, why = read_json_object(path, "meta.json", META_MAX_BYTES, META_MAX_DEPTH, follow_symlinks=follow_symlinks)
    if why is not None:
        return {}, why
    try:
        msgspec.convert(meta, _Meta)
    except msgspec.ValidationError as exc:
        return {}, f"meta.json: {exc}"
    return meta, None

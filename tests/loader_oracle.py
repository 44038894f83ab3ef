"""The loader's rules, one event and then one slice at a time: the reference the package's loader is checked against.

``load(batches)`` takes decoded events (``profiling_core.trace._decode.Event``, as the mirror decodes them) in file
order and gives everything the loader produces (``profiling_core.trace._model.Model``'s columns as lists, the args
rows, the load stats). The rules are those of docs/SQL.md ("Rules", "How flows bind"), stated again in the module
docstrings of ``profiling_core/trace/_collect.py`` (first pass) and ``_nest.py`` (second pass); here each is written
as plainly as it can be, with no speed in mind: a dict per slice, a loop over events, a loop over slices and flow
events in their merged order. Only ``to_ns`` (how a µs value reads as ns, part of decoding) comes from the package.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import zlib

import msgspec

from profiling_core.trace._decode import to_ns

TS_LIMIT = 1 << 62
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
_LIBC.strtod.restype = ctypes.c_double
_LIBC.strtod.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
EMPTY_ARGS = (b"", b"{}", b"null")
U32 = 1 << 32


def load(batches) -> dict:
    """Everything the loader gives for these events (``batches``: (file index of the first, events) pairs)."""
    o = Oracle()
    for start, events in batches:
        for i, e in enumerate(events):
            o.event(start + i, e)
    return o.result()


def text(v):
    """A category (or instant name) as stored: a non-empty string, else NULL."""
    return v if type(v) is str and v else None


def flow_id(v):
    """A number (as uint64), or a string read as hex; None otherwise."""
    if type(v) is int:
        return v & 0xFFFFFFFFFFFFFFFF
    if type(v) is str:
        try:
            return int(v, 16) & 0xFFFFFFFFFFFFFFFF
        except ValueError:
            return None
    return None


def c_strtod(text: str):
    """C's strtod (this process's C library, "C" numeric locale) on ``text`` as a C string: its value if it read the
    whole string and the string is not empty, else None."""
    buf = ctypes.create_string_buffer(text.encode("utf-8", "replace"))  # (a C string ends at its first NUL)
    end = ctypes.c_char_p()
    value = _LIBC.strtod(buf, ctypes.byref(end))
    read = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buf)
    length = len(buf.value)
    return value if length and read == length else None


def counter_fields(raw: bytes):
    """A C event's args: its (key, value) fields in order, duplicates kept; None unless an object."""
    text = raw.decode("utf-8", "replace")
    if not text.lstrip(" \t\r\n").startswith("{"):
        return None
    fields = json.loads(text, object_pairs_hook=list)
    return [(k.encode("utf-16", "surrogatepass").decode("utf-16", "replace"), v) for k, v in fields]


def counter_value(v):
    """A number as a double; a string as strtod reads it; nothing else."""
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return math.copysign(math.inf, v)
    if type(v) is float:
        return v
    if type(v) is str:
        return c_strtod(v)
    return None


def closes(open_start, open_end, s, e) -> bool:
    """An open slice is closed by a slice [s, e) arriving on its lane: it ended before s, or at s unless both are
    instants."""
    return open_end < s or (open_end == s and not (open_start == open_end and e == s))


class Oracle:
    def __init__(self) -> None:
        self.events = 0
        self.skipped: dict[str, int] = {}
        self.synthetic: dict[str, int] = {}
        self.thread_of: dict[tuple, int] = {}   # (pid, tid) as written -> thread index
        self.canon: dict[tuple, int] = {}       # (pid number, tid number) -> thread index
        self.thread_keys: list[tuple] = []      # thread index -> (pid number, tid number, pid, tid as written)
        self.proc_names: dict[int, str] = {}
        self.proc_raw: dict[int, str] = {}
        self.thread_names: dict[int, str] = {}
        self.slices: list[dict] = []
        self.args: list[tuple] = []
        self.flow_events: list[dict] = []
        self.open_b: dict[int, list] = {}
        self.counters: list[dict] = []

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    # ------------------------------------------------------------------------------------------------ ids

    def number(self, v):
        """pid/tid -> number: ints (of less than 62 bits) as they are, None 0, a string 2**30 + crc32 (the next free
        number on a collision), anything else None (not an id)."""
        if type(v) is int:
            return v if -(1 << 62) < v < (1 << 62) else None
        if v is None:
            return 0
        if type(v) is str:
            if v not in self.synthetic:
                n = (1 << 30) | (zlib.crc32(v.encode("utf-8", "surrogatepass")) & ((1 << 30) - 1))
                while n in self.synthetic.values():
                    n += 1
                self.synthetic[v] = n
            return self.synthetic[v]
        return None

    def thread(self, pid, tid):
        """The thread of (pid, tid), made the first time; None if they are not ids."""
        try:
            if (pid, tid) in self.thread_of:
                return self.thread_of[(pid, tid)]
        except TypeError:
            return None
        p, q = self.number(pid), self.number(tid)
        if p is None or q is None:
            return None
        if type(pid) is int and not 0 <= p < U32:
            p = 0
        if (type(tid) is int and not 0 <= q < U32) or q == 0:
            q = p
        if (p, q) not in self.canon:
            self.canon[(p, q)] = len(self.thread_keys)
            self.thread_keys.append((p, q, pid, tid))
        t = self.thread_of[(pid, tid)] = self.canon[(p, q)]
        if type(pid) is str and p not in self.proc_raw:
            self.proc_raw[p] = pid
        return t

    # ------------------------------------------------------------------------------------------- first pass

    def add_slice(self, idx, ts, dur, th, e) -> None:
        if th >= 0:
            name = e.name if type(e.name) is str and e.name else "[No name]"
        else:
            name = text(e.name)
        raw = bytes(e.args)
        arg_set = -1
        if raw not in EMPTY_ARGS:
            arg_set = len(self.args)
            self.args.append((arg_set, raw))
        self.slices.append({"idx": idx, "ts": ts, "dur": dur, "th": th, "name": name, "cat": text(e.cat),
                            "args": arg_set})

    def event(self, idx, e) -> None:
        self.events += 1
        ph = e.ph
        if ph == "X":
            ts, dur = to_ns(e.ts), to_ns(e.dur)
            if ts is None:
                return self.skip("X_missing_or_bad_ts")
            if dur is None:
                return self.skip("X_missing_or_bad_dur")
            if dur < 0:
                return self.skip("X_negative_dur")
            if not (-TS_LIMIT < ts < TS_LIMIT and dur < TS_LIMIT):
                return self.skip("ts_out_of_range")
            th = self.thread(e.pid, e.tid)
            if th is None:
                return self.skip("bad_pid_or_tid")
            self.add_slice(idx, ts, dur, th, e)
        elif ph in ("s", "t", "f"):
            ts = to_ns(e.ts)
            if ts is None or not -TS_LIMIT < ts < TS_LIMIT:
                return self.skip("flow_missing_or_bad_ts")
            fid = flow_id(e.id)
            if fid is None:
                return self.skip("flow_invalid_id")
            th = self.thread(e.pid, e.tid)
            if th is None:
                return self.skip("bad_pid_or_tid")
            self.flow_events.append({"idx": idx, "ts": ts, "ph": ph, "enclosing": e.bp == "e", "th": th,
                                     "key": (fid, text(e.cat), text(e.name))})
        elif ph in ("i", "I", "R"):
            ts = to_ns(e.ts)
            if ts is None or not -TS_LIMIT < ts < TS_LIMIT:
                return self.skip("i_missing_or_bad_ts")
            th = self.thread(e.pid, e.tid)
            if th is None:
                return self.skip("bad_pid_or_tid")
            if e.s == "g":
                self.add_slice(idx, ts, 0, -1, e)
            elif e.s == "p":
                self.add_slice(idx, ts, 0, -2 - self.thread_keys[th][0], e)
            elif e.s is None or e.s == "t":
                self.add_slice(idx, ts, 0, th, e)
            else:
                self.skip("i_bad_scope")
        elif ph == "M":
            self.metadata(e)
        elif ph == "C":
            ts = to_ns(e.ts)
            if ts is None or not -TS_LIMIT < ts < TS_LIMIT:
                return self.skip("C_missing_or_bad_ts")
            th = self.thread(e.pid, e.tid)
            if th is None:
                return self.skip("bad_pid_or_tid")
            fields = counter_fields(bytes(e.args)) if len(e.args) else None
            if fields is None:
                return self.skip("C_without_args")
            prefix = (e.name if type(e.name) is str else "") + (" id: " + e.id if type(e.id) is str and e.id else "")
            for key, v in fields:
                value = counter_value(v)
                if value is None:
                    self.skip("C_arg_not_a_number")
                else:
                    self.counters.append({"idx": idx, "ts": ts, "th": th, "name": prefix + " " + key, "value": value})
        elif ph in ("B", "E"):
            ts = to_ns(e.ts)
            th = self.thread(e.pid, e.tid)
            if ts is None or th is None or not -TS_LIMIT < ts < TS_LIMIT:
                return self.skip(f"{ph}_missing_or_bad_ts")
            stack = self.open_b.setdefault(th, [])
            if ph == "B":
                stack.append((idx, ts, e))
            elif not stack:
                self.skip("E_without_B")
            else:
                b_idx, b_ts, b = stack.pop()
                if ts < b_ts:
                    self.skip("E_before_B")
                else:
                    self.add_slice(b_idx, b_ts, ts - b_ts, th, b)
        elif type(ph) is not str:
            self.skip("missing_or_bad_ph")
        else:
            self.skip(f"unsupported_phase:{ph[:8]}")

    def metadata(self, e) -> None:
        if e.name not in ("process_name", "thread_name"):
            return
        try:  # (text that is not UTF-8 reads with U+FFFD)
            value = msgspec.json.decode(bytes(e.args).decode("utf-8", "replace")).get("name") if len(e.args) else None
        except (msgspec.DecodeError, AttributeError, RecursionError):
            value = None
        if type(value) is not str:
            return self.skip("M_without_name")
        if e.name == "process_name":
            p = self.number(e.pid)
            if p is not None:
                self.proc_names[p] = value
                self.thread(e.pid, e.pid)
        else:
            t = self.thread(e.pid, e.tid)
            if t is not None:
                self.thread_names[t] = value

    # ------------------------------------------------------------------------------------------ second pass

    def result(self) -> dict:
        for stack in self.open_b.values():
            if stack:
                self.skipped["B_without_E"] = self.skipped.get("B_without_E", 0) + len(stack)
        items = [((s["ts"], 0, -s["dur"], s["idx"]), "slice", s) for s in self.slices]
        items += [((f["ts"], 1, 0, f["idx"]), "flow", f) for f in self.flow_events]
        items.sort(key=lambda it: it[0])
        out = {"ts": [], "dur": [], "track_id": [], "category": [], "name": [], "depth": [], "parent_id": [],
               "arg_set_id": []}
        tracks: dict[tuple, int] = {}   # key -> track id, in the order made
        track_types: list[str] = []
        lanes_of: dict[int, list] = {}  # thread -> lanes (stacks of (start, end, slice id))
        pending: dict[int, list] = {}   # thread -> keys of its 'f' events waiting for its next slice
        opener: dict[tuple, int] = {}   # flow key -> slice of its last opener
        trace_ids: dict[tuple, int] = {}
        links: list[list] = []
        spill_tracks = 0

        def track(key, kind):
            if key not in tracks:
                tracks[key] = len(track_types)
                track_types.append(kind)
            return tracks[key]

        def link(key, slice_in):
            if key not in opener:
                self.skip("flow_end_without_start")
            else:
                links.append([opener[key], slice_in, trace_ids[key]])

        for _order, what, x in items:
            if what == "flow":
                t = x["th"]
                if x["ph"] == "f" and not x["enclosing"]:
                    pending.setdefault(t, []).append(x["key"])
                    continue
                lanes = lanes_of.get(t)
                if not lanes or not lanes[0]:
                    self.skip("flow_no_enclosing_slice")
                    continue
                top = lanes[0][-1][2]  # lane 0's top, as the last slice that arrived left it
                if x["ph"] == "s":
                    if x["key"] in opener:
                        self.skip("flow_duplicate_id")
                    else:
                        opener[x["key"]] = top
                        trace_ids.setdefault(x["key"], len(trace_ids))
                    continue
                link(x["key"], top)
                if x["ph"] == "t" and x["key"] in opener:
                    opener[x["key"]] = top
                continue
            sid = len(out["ts"])
            s, e, t = x["ts"], x["ts"] + x["dur"], x["th"]
            depth, parent = 0, -1
            if t >= 0:
                lanes = lanes_of.setdefault(t, [[]])
                for li, st in enumerate(lanes):
                    while st and closes(st[-1][0], st[-1][1], s, e):
                        st.pop()
                    if not st or e <= st[-1][1]:
                        break
                else:
                    li, st = len(lanes), []
                    lanes.append(st)
                    spill_tracks += 1
                tr = track(("thread", t, li), "thread_execution" if li == 0 else "thread_overlapping_slice")
                if st:
                    depth, parent = len(st), st[-1][2]
                st.append((s, e, sid))
            elif t == -1:
                tr = track(("global",), "legacy_chrome_global_instants")
            else:
                tr = track(("process", -2 - t), "legacy_chrome_process_instants")
            for col, v in (("ts", s), ("dur", x["dur"]), ("track_id", tr), ("category", x["cat"]),
                           ("name", x["name"]), ("depth", depth), ("parent_id", parent), ("arg_set_id", x["args"])):
                out[col].append(v)
            for key in pending.pop(t, []) if t >= 0 else []:
                link(key, sid)
        for keys in pending.values():
            self.skipped["flow_end_without_next_slice"] = self.skipped.get("flow_end_without_next_slice", 0) + len(keys)
        for lk in links:  # a link goes out of the slice that began first
            if out["ts"][lk[0]] > out["ts"][lk[1]]:
                lk[0], lk[1] = lk[1], lk[0]
        processes, threads, utid_of, upid_of = self.processes_and_threads()
        track_rows = []
        for key, tid in tracks.items():
            if key[0] == "thread":
                track_rows.append((tid, None, track_types[tid], utid_of[key[1]], None))
            elif key[0] == "process":
                track_rows.append((tid, None, track_types[tid], None, upid_of.get(key[1])))
            else:
                track_rows.append((tid, None, track_types[tid], None, None))
        # counters: in (ts, file order); a track per (process, name), numbered after the slice tracks in the order of
        # their first counter
        counter_tracks: dict[tuple, int] = {}
        counter_cols = {"counter_ts": [], "counter_track_id": [], "counter_value": []}
        for x in sorted(self.counters, key=lambda x: (x["ts"], x["idx"])):
            key = (upid_of[self.thread_keys[x["th"]][0]], x["name"])
            counter_tracks.setdefault(key, len(track_rows) + len(counter_tracks))
            counter_cols["counter_ts"].append(x["ts"])
            counter_cols["counter_track_id"].append(counter_tracks[key])
            counter_cols["counter_value"].append(x["value"].hex())
        out.update(counter_cols, counter_tracks=[(t, name, upid) for (upid, name), t in counter_tracks.items()])
        out.update(processes=processes, threads=threads, tracks=track_rows,
                   flow_out=[lk[0] for lk in links], flow_in=[lk[1] for lk in links],
                   flow_trace_id=[lk[2] for lk in links], args=self.args, skipped=dict(self.skipped),
                   counts=(self.events, len(out["ts"]), len(links), spill_tracks, len(self.counters)))
        return out

    def processes_and_threads(self):
        """upid/utid 0: trace_processor's placeholders; then each process as its first thread is made, with its main
        thread (tid = pid, made with it if no event made it) right after it."""
        processes = [(0, 0, None, 0)]
        threads = [(0, 0, None, 0, 1)]
        upid_of, utid_of, main_of = {}, {}, {}
        for t, (p, q, _pid, _tid) in enumerate(self.thread_keys):
            if q == p and p not in main_of:
                main_of[p] = t
        for t, (p, q, pid, _tid) in enumerate(self.thread_keys):
            if p not in upid_of:
                upid = upid_of[p] = len(processes)
                processes.append((upid, p, self.proc_names.get(p, self.proc_raw.get(p)), int(type(pid) is str)))
                m = main_of.get(p)
                if m is None:
                    threads.append((len(threads), p, None, upid, 1))
                elif m != t:
                    utid_of[m] = len(threads)
                    threads.append((len(threads), p, self.thread_name(m), upid, 1))
            if t not in utid_of:
                utid_of[t] = len(threads)
                threads.append((len(threads), q, self.thread_name(t), upid_of[p], int(q == p)))
        return processes, threads, utid_of, upid_of

    def thread_name(self, t):
        """A string tid names its thread; else its thread_name metadata."""
        tid = self.thread_keys[t][3]
        return tid if type(tid) is str else self.thread_names.get(t)

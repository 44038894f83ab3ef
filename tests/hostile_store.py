"""Hostile files for a run store and its calibrations folder, built with plain os calls (no profiling_core).

Each maker puts one hostile thing at a path: something that is not a regular file, a file that never ends, a file
of gigabytes, bytes that are not UTF-8, JSON nested past any parser's stack, or a JSON object whose values and keys
are wrong (numbers past a float, NaN, negatives, wrong types, missing keys, terminal control characters).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"  # retitle, clear the screen, recolour
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m"  # as profiling_core.present.terminal_safe shows it

TINY_TRACE = '{"traceEvents": []}'

# A calibration as measure_peaks writes it (small numbers: what a CPU reaches).
GOOD_PEAKS = {"device": "Test CPU", "kind": "cpu", "driver": None, "torch_version": "2.0", "measured_at":
              "2026-01-01T00:00:00Z", "method": "m", "gemm_tflops": {"fp32": 0.5, "bf16": 0.25},
              "gemm_tflops_median": {"fp32": 0.4, "bf16": 0.2}, "gemm_sizes": {"fp32": 1024, "bf16": 1024},
              "bandwidth_gbs": 20.0, "bandwidth_gbs_median": 18.0, "copy_bytes": 256 << 20, "threads": 2, "extra": {}}


def _text(text: str):
    return lambda p: p.write_text(text)


def _bytes(data: bytes):
    return lambda p: p.write_bytes(data)


def _huge(p: Path) -> None:
    with open(p, "wb") as f:  # sparse: 3 GiB that take no disk
        f.truncate(3 << 30)


def _self_link(p: Path) -> None:
    os.symlink(p.name, p)


# what is not a JSON file one can read: (maker, a part of the reason the store gives)
NOT_READABLE = {
    "directory": (lambda p: p.mkdir(), "is not a regular file: it is a directory"),
    "fifo": (lambda p: os.mkfifo(p), "is not a regular file: it is a pipe (FIFO)"),
    "link_to_dev_zero": (lambda p: os.symlink("/dev/zero", p), "is not a regular file: it is a character device"),
    "dangling_link": (lambda p: os.symlink("nowhere.json", p), "is missing"),
    "link_loop": (_self_link, "cannot be read: Too many levels of symbolic links"),
    "huge": (_huge, "is over 1 MiB (3,221,225,472 bytes)"),
    "not_utf8": (_bytes(b'{"name": "\xff\xfe"}'), "is not valid JSON: 'utf-8' codec can't decode byte 0xff"),
    "deep": (_text("[" * 100_000 + "]" * 100_000), "nests too deeply to be read"),
    "deep_object": (_text('{"a": ' * 40 + "1" + "}" * 40), "nests more than"),
    "empty": (_text(""), "is empty"),
    "array": (_text("[1, 2]"), "must hold a JSON object, got an array"),
}


def peaks_with(**changes) -> dict:
    """GOOD_PEAKS with fields changed (a value of ``...`` removes the field)."""
    out = {**GOOD_PEAKS, **changes}
    return {k: v for k, v in out.items() if v is not ...}


def _raw_number(field: str, literal: str):
    """GOOD_PEAKS with ``field`` set to a JSON literal Python's json writes no other way (``1e400``)."""
    text = json.dumps(peaks_with(**{field: 12345.5}))
    return _text(text.replace("12345.5", literal))


# calibrations that are JSON objects but not calibrations: (maker, a part of the reason)
BAD_PEAKS = {
    "copy_bytes_10e400": (_text(json.dumps(peaks_with(copy_bytes=10 ** 400))), "'copy_bytes' must be an integer"),
    "copy_bytes_float": (_text(json.dumps(peaks_with(copy_bytes=1.5))), "'copy_bytes' must be an integer"),
    "bandwidth_1e400": (_raw_number("bandwidth_gbs", "1e400"), "'bandwidth_gbs' must be a number"),
    "bandwidth_nan": (_raw_number("bandwidth_gbs", "NaN"), "'bandwidth_gbs' must be a number"),
    "bandwidth_negative": (_text(json.dumps(peaks_with(bandwidth_gbs=-3.0))), "'bandwidth_gbs' must be a number"),
    "bandwidth_string": (_text(json.dumps(peaks_with(bandwidth_gbs="fast"))), "'bandwidth_gbs' must be a number"),
    "bandwidth_bool": (_text(json.dumps(peaks_with(bandwidth_gbs=True))), "'bandwidth_gbs' must be a number"),
    "tflops_infinity": (_text(json.dumps(peaks_with(gemm_tflops={"fp32": "x", "bf16": 0.25})).replace(
        '"x"', "Infinity")), "'gemm_tflops' must map each dtype to a number"),
    "no_median_for_a_dtype": (_text(json.dumps(peaks_with(gemm_tflops_median={"fp32": 0.4}))),
                              "'gemm_tflops_median' has no entry for bf16"),
    "no_size_for_a_dtype": (_text(json.dumps(peaks_with(gemm_sizes={"bf16": 1024}))),
                            "'gemm_sizes' has no entry for fp32"),
    "missing_method": (_text(json.dumps(peaks_with(method=...))), "calibration field 'method' is missing"),
    "control_chars_in_a_key": (_text(json.dumps(peaks_with(
        gemm_tflops={"fp32" + ESC: 0.5, "bf16": 0.25}))), "'gemm_tflops' has a dtype 'fp32\\x1b"),
    "kind_tpu": (_text(json.dumps(peaks_with(kind="tpu"))), "'kind' must be 'cuda' or 'cpu', got 'tpu'"),
    "threads_huge": (_text(json.dumps(peaks_with(threads=10 ** 30))), "'threads' must be an integer"),
}

# a readable calibration whose text holds terminal control characters: listed, with them shown as escapes
ESCAPING_PEAKS = peaks_with(device="Test CPU " + ESC, method="m " + ESC, torch_version="2.0" + ESC)

# JSON text whose strings hold lone surrogates (``"\ud800"``: valid JSON, not Unicode): they read as U+FFFD
LONE_SURROGATES_PEAKS = json.dumps(peaks_with(device="Test CPU \ud800", method="m \udcff"))
LONE_SURROGATES_META = '{"name": "n \\ud800", "status": "ok \\udfff", "source": "import", "config": null}'


def make(path: Path, maker) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    maker(path)


def import_tiny(root: Path, name: str) -> Path:
    """A run imported through the store's own door (a trace with no events); returns its folder."""
    from profiling_core import RunStore
    tiny = root.parent / f"{name}.trace.json"
    tiny.write_text(TINY_TRACE)
    return RunStore(root).import_trace(tiny, name=name).run_dir


def raw_controls(text: str) -> list[str]:
    """The control characters (C0 but newline, DEL, C1) in ``text``: what a terminal would act on."""
    return sorted({c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f})

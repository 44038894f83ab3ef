"""Export: charts to PNG and SVG (vl-convert, offline), DataFrames to CSV, pages to one HTML file.

- ``chart_png(chart)`` / ``chart_svg(chart)``: render an Altair chart's Vega-Lite spec with vl-convert,
  which bundles Vega in-process (no browser, no network).
- ``dataframe_csv(df)``: UTF-8 CSV bytes without the index.
- ``html_report(...)``: one self-contained HTML file: charts inlined as SVG, tables as HTML, findings,
  configs and the environment. It loads nothing from the network, so it opens offline and can be mailed.

No Streamlit here; the app wraps these in cached download buttons.
"""
from __future__ import annotations

import datetime as _dt
import json
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import altair as alt
import pandas as pd

from ..units import format_count
from .web import html_text, script_json, vega_safe

__all__ = ["chart_spec", "chart_png", "chart_svg", "dataframe_csv", "significant_figures", "ReportSection",
           "html_report", "safe_filename"]

ChartLike = Union[alt.TopLevelMixin, Mapping[str, Any]]


def _vl_version() -> Optional[str]:
    """The Vega-Lite version Altair writes (``"6.4"``), if vl-convert bundles it; else vl-convert's default."""
    import vl_convert as vlc
    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return wanted if wanted in vlc.get_vegalite_versions() else None


def chart_spec(chart: ChartLike) -> dict:
    """The chart's Vega-Lite spec as a plain dict (of a dict: a copy), its strings through :func:`vega_safe`: what
    the app draws and what vl-convert renders."""
    return vega_safe(dict(chart) if isinstance(chart, Mapping) else chart.to_dict())


def chart_png(chart: ChartLike, *, scale: float = 2.0) -> bytes:
    """PNG bytes of the chart (``scale`` 2 for crisp slides), drawn from :func:`chart_spec`."""
    import vl_convert as vlc
    return vlc.vegalite_to_png(chart_spec(chart), scale=scale, vl_version=_vl_version())


def chart_svg(chart: ChartLike) -> str:
    """SVG text of the chart, drawn from :func:`chart_spec`; text stays text, so it scales and can be searched."""
    import vl_convert as vlc
    return vlc.vegalite_to_svg(chart_spec(chart), vl_version=_vl_version())


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""How a cell a spreadsheet reads as a formula begins (OWASP's list for CSV injection)."""
_SIGNED_FIGURE = re.compile(r"[+-]?\d[\d,.]*(?:[eE][+-]?\d+)?(?: ?[A-Za-zµ%/]+)?")
"""A number, with a unit after it or none (``-1.5 KiB``, ``+3%``): no formula, written as it is."""


def _csv_cell(v: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (a kernel's or a run's name beginning ``=``, ``+``, ``-``,
    ``@``), with a ``'`` before it so that it shows as text; any other cell as it is."""
    if isinstance(v, str) and v.startswith(_FORMULA_START) and not _SIGNED_FIGURE.fullmatch(v):
        return "'" + v
    return v


def dataframe_csv(df: pd.DataFrame) -> bytes:
    """UTF-8 CSV bytes of the DataFrame, without the index. Text that comes from a trace or a run's name is
    untrusted: a cell a spreadsheet would run as a formula is written as text (:func:`_csv_cell`)."""
    out = df.copy(deep=False)
    for k in range(df.shape[1]):  # (by position: column names may repeat)
        col = df.iloc[:, k]
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            out.isetitem(k, col.map(_csv_cell))
    return out.to_csv(index=False).encode("utf-8")


def significant_figures(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every float cell rounded to the figures the HTML report's tables write (:func:`format_count`: six
    significant digits, never an exponent), so a page's table, its CSV and the report read alike: a fixed 3 decimals
    wrote a kernel's CV of 0.00815 as 0.008 and one under 0.0005 as 0. Other columns, and NaN or infinite cells, are
    kept as they are."""
    out = df.copy(deep=False)
    for k in range(df.shape[1]):  # (by position: column names may repeat)
        col = df.iloc[:, k]
        if pd.api.types.is_float_dtype(col):
            out.isetitem(k, col.map(lambda v: float(format_count(v)) if pd.notna(v) and abs(v) != float("inf")
                                    else v))
    return out


def safe_filename(text: str, default: str = "export") -> str:
    """A file-name-safe slug of ``text`` (letters, digits, ``-``, ``_``, ``.``)."""
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text)).strip("._")
    while "__" in slug:
        slug = slug.replace("__", "_")
    return slug[:120] or default


# --- HTML report ----------------------------------------------------------------------------------

@dataclass
class ReportSection:
    """One block of a report: a heading, optional prose, charts, tables and findings."""

    title: str
    text: str = ""
    charts: Sequence[ChartLike] = field(default_factory=list)
    tables: Sequence[tuple[str, pd.DataFrame]] = field(default_factory=list)
    findings: Sequence[Any] = field(default_factory=list)
    """Objects with ``title`` and ``text`` (profiling_core.explain.Finding), or (title, text) pairs."""
    preformatted: str = ""
    """Text shown as it is, in a monospaced block (torch's own profiler table)."""


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.8em} h3{font-size:1.05em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0} th,td{border:1px solid #ddd;padding:3px 7px;
text-align:right} th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.chart{margin:1em 0;overflow-x:auto} .finding{background:#f6f8fa;border-left:4px solid #1f77b4;
padding:.5em .9em;margin:.6em 0} .meta{color:#666;font-size:.85em} pre{background:#f6f8fa;padding:.6em;
overflow-x:auto;font-size:.85em}
"""


def _finding_html(f: Any) -> str:
    if isinstance(f, (tuple, list)):
        title, text = f[0], f[1]
    else:
        title, text = getattr(f, "title", ""), getattr(f, "text", str(f))
    return f'<div class="finding"><strong>{html_text(str(title))}</strong><br>{html_text(str(text))}</div>'


def _table_html(df: pd.DataFrame, max_rows: int = 200) -> str:
    shown = df.head(max_rows)
    note = f'<p class="meta">first {max_rows} of {len(df)} rows</p>' if len(df) > max_rows else ""
    # every cell that is not a number, and every column name, through html_text (pandas' own escape leaves quotes)
    # (a missing figure is an empty cell, as in the CSV: pandas writes NA as "<NA>", and a NaN as "NaN" without
    # calling float_format)
    cells = shown.map(lambda v: "" if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v)
                      else v if isinstance(v, numbers.Number) else html_text(v))
    cells.columns = [html_text(c) for c in shown.columns]
    # (six significant digits, never an exponent: a fixed 3 decimals wrote 0.000581 TFLOP/s as 0.001, a share of
    # 0.0004 as 0.000 and one of 0.9996 as 1.000)
    return cells.to_html(index=False, escape=False, border=0, float_format=format_count) + note


def _kv_html(data: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{html_text(str(k))}</th><td>{html_text(_fmt(v))}</td></tr>"
                   for k, v in data.items())
    return f"<table>{rows}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def html_report(title: str, sections: Iterable[ReportSection], *,
                configs: Optional[Mapping[str, Mapping[str, Any]]] = None,
                environment: Optional[Mapping[str, Any]] = None,
                generated: Optional[_dt.datetime] = None) -> str:
    """One self-contained HTML page: sections (charts as inline SVG, tables, findings), configs, environment.

    configs maps a label (run id or name) to its config dict (with where the run was recorded);
    ``environment`` is the machine that wrote the report, not one a run ran on. Nothing is fetched from the network
    when the file is opened.
    """
    when = (generated or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html_text(title)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>{html_text(title)}</h1><p class='meta'>generated {when} by profiling_core</p>"]
    for sec in sections:
        parts.append(f"<h2>{html_text(sec.title)}</h2>")
        if sec.text:
            parts.extend(f"<p>{html_text(p)}</p>" for p in sec.text.split("\n\n") if p.strip())
        if sec.preformatted:
            parts.append(f"<pre style=\"font-size:11px;overflow-x:auto\">{html_text(sec.preformatted)}</pre>")
        for f in sec.findings:
            parts.append(_finding_html(f))
        for ch in sec.charts:
            parts.append(f"<div class='chart'>{chart_svg(ch)}</div>")
        for name, df in sec.tables:
            parts.append(f"<h3>{html_text(name)}</h3>{_table_html(df)}")
    if configs:
        parts.append("<h2>Configurations</h2>")
        for label, cfg in configs.items():
            parts.append(f"<h3>{html_text(str(label))}</h3>{_kv_html(cfg or {})}")
    if environment:  # (the runs' own machines are in their configurations above)
        parts.append(f"<h2>Where this report was written</h2>{_kv_html(environment)}")
    parts.append("</body></html>")
    return "\n".join(parts)


PERFETTO_UI = "https://ui.perfetto.dev"
PERFETTO_OPEN_MAX_BYTES = 64 << 20
"""The largest trace :func:`perfetto_open_html` hands over (it travels inside the page, base64-encoded)."""


def perfetto_open_html(trace: bytes, title: str, file_name: str = "trace.json") -> str:
    """A button that opens ``trace`` in the Perfetto UI from the user's own browser, the way Perfetto documents for
    embedding (``ui.perfetto.dev`` in a new window, ``PING`` until it answers ``PONG``, then one ``postMessage`` of
    ``{perfetto: {buffer, title, fileName}}``): the trace goes from this page to that window, never through a server.
    ``title`` and ``file_name`` are untrusted (a run's or an upload's name): they reach the script only through
    :func:`~profiling_core.present.script_json`, so no name can end the script or stop it from running."""
    import base64
    if len(trace) > PERFETTO_OPEN_MAX_BYTES:
        raise ValueError(f"the trace is {len(trace) / 2**20:.0f} MiB; at most {PERFETTO_OPEN_MAX_BYTES >> 20} MiB "
                         "can be handed to the Perfetto UI from the page (download it and open it there instead)")
    data = base64.b64encode(trace).decode("ascii")
    meta = script_json({"title": str(title), "fileName": str(file_name), "origin": PERFETTO_UI})
    return f"""<button id="open" style="font: 14px sans-serif; padding: 6px 12px; cursor: pointer">Open in Perfetto UI</button>
<span id="status" style="font: 13px sans-serif; color: #555; margin-left: 8px"></span>
<script>
const META = {meta};
const B64 = "{data}";
function bytes() {{
  const s = atob(B64), a = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
  return a.buffer;
}}
document.getElementById("open").onclick = () => {{
  const status = document.getElementById("status");
  const win = window.open(META.origin);
  if (!win) {{ status.textContent = "the browser blocked the new window: allow pop-ups for this page"; return; }}
  status.textContent = "waiting for the Perfetto UI ...";
  const ping = setInterval(() => win.postMessage("PING", META.origin), 50);
  window.addEventListener("message", function onPong(e) {{
    if (e.source !== win || e.data !== "PONG") return;
    clearInterval(ping);
    window.removeEventListener("message", onPong);
    win.postMessage({{perfetto: {{buffer: bytes(), title: META.title, fileName: META.fileName}}}}, META.origin);
    status.textContent = "sent to the Perfetto UI";
  }});
}};
</script>"""

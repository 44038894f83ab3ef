"""The SQL queries behind every analysis, one ``.sql`` file per query, loaded by name.

Each file starts with a ``-- <one-line description>`` comment and uses only trace_processor's tables and
functions (``slice``, ``thread_track``, ``thread``, ``process``, ``flow``, ``args``, ``extract_arg``), so the
same text runs on both engines of :func:`profiling_core.open_trace`::

    >>> from profiling_core.queries import load_query, list_queries
    >>> sql = load_query("steps")
    >>> session.query(sql)                    # doctest: +SKIP

Queries whose name starts with ``example_`` are starting points for the SQL console.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import QueryError

__all__ = ["load_query", "list_queries", "query_names"]

_DIR = Path(__file__).resolve().parent


_INCLUDE = re.compile(r"^-- @include (\w+)\n", re.M)


def query_names() -> list[str]:
    """Names of the shipped queries (file names without ``.sql``), sorted.  Files starting with ``_`` are
    fragments that queries include, not queries."""
    return sorted(p.stem for p in _DIR.glob("*.sql") if not p.stem.startswith("_"))


def _expand(text: str, seen: tuple[str, ...] = ()) -> str:
    """Replace each ``-- @include NAME`` line by the fragment ``_NAME.sql`` (so shared CTEs live once, and the
    text sent to either engine is still one plain SQL statement)."""
    def sub(m: "re.Match[str]") -> str:
        name = m.group(1)
        path = _DIR / f"_{name}.sql"
        if name in seen or not path.exists():
            raise QueryError(f"query fragment {name!r} is missing or includes itself")
        return _expand(path.read_text(encoding="utf-8"), seen + (name,))
    return _INCLUDE.sub(sub, text)


def load_query(name: str) -> str:
    """Return the SQL text of the query ``name``.

    Args:
        name: a query name such as ``"steps"`` (with or without the ``.sql`` suffix).

    Returns:
        The file's text, leading comment included, with ``-- @include`` fragments expanded.

    Raises:
        QueryError: no query has that name; the message lists the known names.
    """
    stem = name[:-4] if isinstance(name, str) and name.endswith(".sql") else name
    known = query_names()
    if not isinstance(stem, str) or stem not in known:
        raise QueryError(f"no query named {name!r}; known queries: {', '.join(known)}")
    return _expand((_DIR / f"{stem}.sql").read_text(encoding="utf-8"))


def _description(text: str) -> str:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return first[3:].strip() if first.startswith("-- ") else ""


def list_queries() -> dict[str, str]:
    """Every shipped query with its one-line description (the file's leading ``-- `` comment).

    Returns:
        ``{name: description}`` in name order.
    """
    return {name: _description(load_query(name)) for name in query_names()}

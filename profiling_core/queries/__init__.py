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

from pathlib import Path

from ..errors import QueryError

__all__ = ["load_query", "list_queries", "query_names"]

_DIR = Path(__file__).resolve().parent


def query_names() -> list[str]:
    """Names of the shipped queries (file names without ``.sql``), sorted."""
    return sorted(p.stem for p in _DIR.glob("*.sql"))


def load_query(name: str) -> str:
    """Return the SQL text of the query ``name``.

    Args:
        name: a query name such as ``"steps"`` (with or without the ``.sql`` suffix).

    Returns:
        The file's text, leading comment included.

    Raises:
        QueryError: no query has that name; the message lists the known names.
    """
    stem = name[:-4] if isinstance(name, str) and name.endswith(".sql") else name
    known = query_names()
    if not isinstance(stem, str) or stem not in known:
        raise QueryError(f"no query named {name!r}; known queries: {', '.join(known)}")
    return (_DIR / f"{stem}.sql").read_text(encoding="utf-8")


def _description(text: str) -> str:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return first[3:].strip() if first.startswith("-- ") else ""


def list_queries() -> dict[str, str]:
    """Every shipped query with its one-line description (the file's leading ``-- `` comment).

    Returns:
        ``{name: description}`` in name order.
    """
    return {name: _description(load_query(name)) for name in query_names()}

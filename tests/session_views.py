"""Views of a trace session for tests (not collected: no test_ prefix)."""
from __future__ import annotations


class SqlOnly:
    """The same session without its in-memory columns (and without the mirror's args database): every piece the
    analyses read then comes from its SQL query, as on the perfetto engine."""

    def __init__(self, s):
        self._s = s
        self.engine = s.engine
        self.tables = None

    def query(self, sql):
        return self._s.query(sql)

    def query_columns(self, sql):
        return self._s.query_columns(sql)

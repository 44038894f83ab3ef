"""``TextColumn.of``: rows coded by value, distinct values in order of first appearance, NULL as -1, checked against
``pd.factorize`` (an independent coder) on strings that are one object per value (as the mirror's loader interns
them) and on strings that are a new object per row (as perfetto's result cells are)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiling_core.trace._tables import TextColumn


def _fresh(s):
    return None if s is None else "".join(list(s))  # an equal string, another object


@pytest.mark.parametrize("fresh", [False, True], ids=["one object per value", "a new object per row"])
def test_codes_are_pandas_factorize_codes_in_the_given_order(fresh):
    rng = np.random.default_rng(7)
    pool = ["aten::mm", "aten::add", "void gemm<128>", "", "ProfilerStep#1", None, "Memcpy DtoD (Device -> Device)"]
    values = [pool[i] for i in rng.integers(0, len(pool), 5000)]
    if fresh:
        values = [_fresh(v) for v in values]
        assert len({id(v) for v in values if v == "aten::mm"}) > 1
    order = rng.permutation(len(values))
    col = TextColumn.of(values, order)
    want_codes, want_uniq = pd.factorize(np.array(values, dtype=object)[order])
    assert col.codes.tolist() == want_codes.tolist()
    assert col.uniq == list(want_uniq)
    assert col.tolist() == [values[i] for i in order]


def test_nan_counts_as_null_and_an_object_array_reads_like_a_list():
    values = np.array(["a", float("nan"), None, "b", "a", float("nan")], dtype=object)
    col = TextColumn.of(values, np.arange(6))
    assert col.codes.tolist() == [0, -1, -1, 1, 0, -1]
    assert col.uniq == ["a", "b"]
    assert TextColumn.of(values.tolist(), np.arange(6)) == col
    assert TextColumn.of([], np.arange(0)).uniq == []

"""``TextColumn.of``: rows coded by value, distinct values in order of first appearance, NULL as -1, checked against
``pd.factorize`` (an independent coder) on strings that are one object per value (as the mirror's loader interns
them) and on strings that are a new object per row (as perfetto's result cells are); and the analyses' ``factorize``
(the same coding, pandas' rules for missing values) against ``pd.factorize`` itself."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from profiling_core.analyses._shared import factorize
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


def _cells():
    return hst.lists(hst.one_of(
        hst.sampled_from(["aten::mm", "void gemm<128>", "", "ProfilerStep#1", "a"]),
        hst.builds(lambda s: "".join(list(s)), hst.sampled_from(["aten::mm", "a"])),  # equal text, another object
        hst.sampled_from([None, float("nan"), np.float64("nan"), pd.NA, pd.NaT]),
        hst.sampled_from([0, 1, 1.0, True, False, 2.5, np.str_("a"), (1, 2)])), max_size=40)


@pytest.mark.parametrize("use_na_sentinel", [True, False])
def test_the_analyses_factorize_is_pandas_factorize(use_na_sentinel):
    """``analyses._shared.factorize`` (dict-based, for speed on long kernel names) against ``pd.factorize`` itself:
    the same codes and the same distinct values (missing values as pandas gives them), on columns mixing text
    (equal strings as one object or several), every kind of missing value, numbers equal across types and text
    subclasses; and the same TypeError for a value that cannot be hashed."""
    @settings(max_examples=300, deadline=None)
    @given(_cells())
    def check(cells):
        a = np.empty(len(cells), dtype=object)
        a[:] = cells if cells else []
        want_codes, want_uniq = pd.factorize(a, use_na_sentinel=use_na_sentinel)
        for given_as in (a, pd.Series(a, dtype=object), list(a)):
            codes, uniq = factorize(given_as, use_na_sentinel=use_na_sentinel)
            assert codes.tolist() == want_codes.tolist()
            assert [repr(u) for u in uniq.tolist()] == [repr(u) for u in want_uniq.tolist()]
    check()
    unhashable = np.empty(2, dtype=object)
    unhashable[0], unhashable[1] = ["a"], ["a"]
    with pytest.raises(TypeError):
        pd.factorize(unhashable)
    with pytest.raises(TypeError):
        factorize(unhashable)

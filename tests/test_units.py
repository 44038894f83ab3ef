"""format_duration_us and human_bytes: the one duration and the one size formatter, read as a person would read
their output."""
import math

import numpy as np
import pandas as pd
import pytest

from conftest import DATA
from profiling_core.units import (MISSING, cut_apart, format_count, format_duration_us, format_rate, format_share,
                                  format_times, human_bytes)


@pytest.mark.parametrize("us,text", [
    (0, "0.0 µs"),
    (3.64, "3.6 µs"),
    (78.8, "78.8 µs"),
    (999.94, "999.9 µs"),
    (999.96, "1.00 ms"),          # rounds up into the next unit instead of reading "1000.0 µs"
    (1000, "1.00 ms"),
    (1520.4, "1.52 ms"),
    (102_280, "102.28 ms"),
    (13_336_320, "13336.32 ms"),  # ms all the way up: the findings' snapshotted texts read so
    (-250.0, "-250.0 µs"),
    (-4_500, "-4.50 ms"),
    (np.float64(211.24), "211.2 µs"),
    (np.int64(2048), "2.05 ms"),
])
def test_durations_read_in_us_below_a_millisecond_and_ms_above(us, text):
    assert format_duration_us(us) == text


@pytest.mark.parametrize("missing", [None, float("nan"), np.nan, pd.NA, math.nan, "not a number"])
def test_an_unknown_duration_reads_na(missing):
    assert format_duration_us(missing) == "n/a"


@pytest.mark.parametrize("us,text", [
    (5.3124, "5.312 µs"),       # to the nanosecond below 1 ms
    (170.8466, "170.847 µs"),
    (999.9996, "1.000 ms"),     # rounds into the next unit, as the short form does
    (1024.4, "1.024 ms"),       # to the microsecond above
    (2_170_123.0, "2170.123 ms"),
    (None, "n/a"),
])
def test_fine_durations_keep_the_digits_that_tell_close_ones_apart(us, text):
    assert format_duration_us(us, fine=True) == text


@pytest.mark.parametrize("x,decimals,text", [
    (0.25, 0, "25%"),
    (0.0, 0, "0%"),              # none is none
    (1.0, 0, "100%"),            # all is all
    (0.9984, 0, "99.8%"),        # 64 µs of GPU work in a 41 ms step: not "idle 100%"
    (0.0016, 0, "0.2%"),         # ...and not "busy 0%"
    (0.0016, 1, "0.2%"),
    (0.00016, 1, "0.02%"),
    (0.999999, 0, "over 99.99%"),
    (0.0000001, 0, "under 0.01%"),
    (0.995, 0, "99.5%"),         # 100% to no decimals, so one more
    (0.5, 1, "50.0%"),
    (np.float64(0.123), 1, "12.3%"),
    (float("nan"), 0, "n/a"),
    ("text", 0, "n/a"),
])
def test_a_share_reads_as_none_or_all_only_when_it_is(x, decimals, text):
    assert format_share(x, decimals) == text


@pytest.mark.parametrize("x,text", [
    (0.97, "0.97"),
    (1.5, "1.50"),
    (0.0, "0.00"),
    (0.0016, "0.0016"),          # 64 µs of GPU work per 41 ms of CPU: two significant digits, not "0.00"
    (0.000123, "0.00012"),
    (None, "n/a"),
])
def test_a_ratio_that_is_not_zero_never_reads_as_zero(x, text):
    assert format_times(x) == text


def test_the_variance_finding_quotes_durations_as_formatted():
    """The question-8 finding writes its kernel's median exactly as the formatter does, to the nanosecond."""
    from profiling_core import open_trace
    from profiling_core.explain.questions import findings

    path = DATA / "h200" / "4096_bf16_warm_eager_a20.json"
    q8 = next(f for f in findings(open_trace(path)) if f.id == "q8.variance")
    assert f"median {format_duration_us(q8.evidence['median_us'], fine=True)}" in q8.text


@pytest.mark.parametrize("n,text", [
    (0, "0 B"),
    (1, "1 B"),
    (1023, "1,023 B"),               # whole bytes, with a thousands separator, below 1 KiB
    (1024, "1.0 KiB"),
    (1536, "1.5 KiB"),
    (10 * 1024 + 100, "10.1 KiB"),   # 10340 / 1024 = 10.098
    (5 * 2**20, "5.0 MiB"),
    (3 * 2**30 + 2**29, "3.5 GiB"),
    (2 * 2**40, "2,048.0 GiB"),      # GiB all the way up
    (np.int64(2**20), "1.0 MiB"),
    (-1536, "-1.5 KiB"),             # memory freed: the magnitude with a minus sign, not "-1,536 B"
    (-(3 * 2**30), "-3.0 GiB"),
])
def test_sizes_read_in_binary_units(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize("x, text", [(0.000581, "0.000581"), (0.556, "0.556"), (1.0, "1.00"), (12.34, "12.3"),
                                     (233.4, "233"), (1920.4, "1,920"), (0, "0"), (None, MISSING),
                                     (float("nan"), MISSING), (-12.34, "-12.3")])
def test_a_rate_reads_with_three_significant_digits_and_no_exponent(x, text):
    assert format_rate(x) == text


@pytest.mark.parametrize("x,text", [
    (3, "3"), (1462.0, "1462"), (np.int64(7), "7"),
    (1_000_000, "1000000"),            # :g wrote 1e+06
    (2_500_000.0, "2500000"),          # ... and 2.5e+06
    (1_234_567.5, "1234567.5"),        # ... and 1.23457e+06
    (1.5, "1.5"), (10 / 3, "3.33333"), (0.5, "0.5"),
    (0.0000125, "0.0000125"),          # :g wrote 1.25e-05
    (None, MISSING), (float("nan"), MISSING), (math.inf, MISSING), ("3", "3"), ("many", MISSING),
])
def test_a_count_per_step_reads_whole_and_never_in_exponent_form(x, text):
    assert format_count(x) == text


@pytest.mark.parametrize("width", [48, 60, 70])
def test_names_listed_side_by_side_stay_apart(width):
    """Kernel names that share a long head (ATen's elementwise kernels differ in their functor, Tensile's in their
    tile arguments) are cut to the width and still read apart; a name that fits is whole; a name alone is cut at the
    width."""
    names = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
             "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
             "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
             "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
             "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_ISA942_LBSPPA512",
             "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_ISA942_LBSPPA128",
             "attn_fwd"]
    shown = cut_apart(names, width)
    assert len(set(shown)) == len(names) and all(len(x) <= width for x in shown)
    assert shown[-1] == "attn_fwd"
    assert all(x.endswith("…") for x in shown[:-1])
    assert cut_apart([names[0]], width) == [names[0][:width - 1] + "…"]

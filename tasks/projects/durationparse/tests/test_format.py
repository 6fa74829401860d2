import pytest
from durationparse import (
    Duration,
    DurationError,
    format_clock,
    format_compact,
    format_iso,
    format_long,
    normalize,
    parse_duration,
)

HOUR = 3_600_000
DAY = 24 * HOUR


def test_compact_basic():
    assert format_compact(Duration(DAY + 2 * HOUR + 30 * 60_000)) == "1d2h30m"


def test_compact_zero_and_negative():
    assert format_compact(Duration(0)) == "0s"
    assert format_compact(Duration(-90 * 60_000)) == "-1h30m"


def test_compact_milliseconds():
    assert format_compact(Duration(1_250)) == "1s250ms"
    assert format_compact(Duration(7)) == "7ms"


def test_compact_largest_unit():
    assert format_compact(Duration(DAY + 2 * HOUR), largest_unit="h") == "26h"
    assert format_compact(Duration(8 * DAY), largest_unit="w") == "1w1d"
    assert format_compact(Duration(8 * DAY)) == "8d"


def test_compact_max_units_truncates():
    assert format_compact(Duration(DAY + 2 * HOUR + 59 * 60_000), max_units=2) == "1d2h"
    assert format_compact(Duration(DAY + 5_000), max_units=2) == "1d5s"


def test_max_units_must_be_positive():
    with pytest.raises(DurationError, match="max_units must be at least 1, got 0"):
        format_compact(Duration(5), max_units=0)


def test_long_form_with_conjunction():
    assert format_long(Duration(2 * DAY + 3 * HOUR + 60_000)) == "2 days, 3 hours and 1 minute"
    assert format_long(Duration(HOUR + 30 * 60_000)) == "1 hour and 30 minutes"


def test_long_form_single_part_and_zero():
    assert format_long(Duration(1_000)) == "1 second"
    assert format_long(Duration(2)) == "2 milliseconds"
    assert format_long(Duration(0)) == "0 seconds"


def test_long_form_without_conjunction():
    assert format_long(Duration(HOUR + 60_000 + 1_000), conjunction=None) == "1 hour, 1 minute, 1 second"


def test_long_form_custom_conjunction_and_sign():
    assert format_long(Duration(-(HOUR + 1)), conjunction="&") == "-1 hour & 1 millisecond"


def test_long_form_options():
    assert format_long(Duration(8 * DAY + HOUR), largest_unit="w", max_units=2) == "1 week and 1 day"


def test_iso_time_only():
    assert format_iso(Duration(HOUR + 30 * 60_000)) == "PT1H30M"


def test_iso_full_with_fraction():
    assert format_iso(Duration(DAY + 2 * HOUR + 3 * 60_000 + 4_500)) == "P1DT2H3M4.5S"


def test_iso_zero_date_only_and_negative():
    assert format_iso(Duration(0)) == "PT0S"
    assert format_iso(Duration(9 * DAY)) == "P9D"
    assert format_iso(Duration(-5 * 60_000)) == "-PT5M"


def test_iso_sub_second_values():
    assert format_iso(Duration(250)) == "PT0.25S"
    assert format_iso(Duration(1)) == "PT0.001S"
    assert format_iso(Duration(61_100)) == "PT1M1.1S"


def test_clock_format():
    assert format_clock(Duration(HOUR + 30 * 60_000)) == "01:30:00"
    assert format_clock(Duration(DAY + 2 * HOUR + 5_000)) == "26:00:05"


def test_clock_format_milliseconds_and_sign():
    assert format_clock(Duration(1_500)) == "00:00:01.500"
    assert format_clock(Duration(-5 * 60_000)) == "-00:05:00"


def test_normalize_styles():
    assert normalize("90 minutes") == "1h30m"
    assert normalize("PT1H30M", "long") == "1 hour and 30 minutes"
    assert normalize("1.5h", style="iso") == "PT1H30M"
    assert normalize("2 days", style="clock") == "48:00:00"


def test_normalize_rejects_unknown_style():
    with pytest.raises(DurationError, match="unknown format style 'fancy'"):
        normalize("1h", style="fancy")


def test_round_trips_through_every_style():
    duration = Duration(-(3 * DAY + 4 * HOUR + 5 * 60_000 + 6_789))
    assert parse_duration(format_compact(duration)) == duration
    assert parse_duration(format_long(duration)) == duration
    assert parse_duration(format_iso(duration)) == duration
    assert parse_duration(format_clock(duration)) == duration

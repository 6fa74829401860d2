import pytest
from durationparse import DurationError, parse_clock, parse_duration, parse_human, parse_iso


def test_compact_hours_and_minutes():
    assert parse_duration("1h30m").milliseconds == 5_400_000


def test_compact_with_spaces_between_parts():
    assert parse_duration("1h 30m 15s").milliseconds == 5_415_000


def test_fractional_hours():
    assert parse_duration("1.5h").milliseconds == 5_400_000


def test_leading_dot_number():
    assert parse_duration(".5m").milliseconds == 30_000


def test_bare_number_is_seconds():
    assert parse_duration("90").milliseconds == 90_000
    assert parse_duration("2.5").milliseconds == 2_500


def test_long_form_with_commas_and_and():
    duration = parse_duration("2 days, 3 hours and 5 minutes")
    assert duration.milliseconds == ((2 * 24 + 3) * 60 + 5) * 60_000


def test_aliases_are_case_insensitive():
    assert parse_duration("1 HR 2 Mins 3 secs").milliseconds == 3_723_000


def test_milliseconds_unit_next_to_seconds():
    assert parse_duration("1s250ms").milliseconds == 1_250
    assert parse_duration("250 msec").milliseconds == 250


def test_weeks_and_days():
    assert parse_duration("1w 1d").milliseconds == 8 * 86_400_000
    assert parse_duration("2 weeks").milliseconds == 14 * 86_400_000


def test_signs():
    assert parse_duration("-1h30m").milliseconds == -5_400_000
    assert parse_duration("+5m").milliseconds == 300_000
    assert parse_human("- 2s").milliseconds == -2_000


def test_rounding_to_milliseconds_is_half_even():
    assert parse_duration("1.0005s").milliseconds == 1_000
    assert parse_duration("1.0015s").milliseconds == 1_002
    assert parse_duration("1.0016s").milliseconds == 1_002


def test_duplicate_unit_is_rejected():
    with pytest.raises(DurationError, match=r"unit 'h' given more than once in '1h 2hours'"):
        parse_duration("1h 2hours")


def test_unknown_unit_is_rejected():
    with pytest.raises(DurationError, match="unknown duration unit 'parsecs'"):
        parse_duration("5 parsecs")


def test_leading_separator_is_rejected():
    with pytest.raises(DurationError, match="starts with a separator"):
        parse_duration(", 5m")
    with pytest.raises(DurationError, match="starts with a separator"):
        parse_duration("and 5m")


def test_trailing_garbage_is_rejected():
    with pytest.raises(DurationError, match=r"unexpected text '!!' in duration '5m!!'"):
        parse_duration("5m!!")


def test_dangling_and_is_rejected():
    with pytest.raises(DurationError, match="unexpected text 'and'"):
        parse_duration("5m and")


def test_empty_and_sign_only_inputs_are_rejected():
    with pytest.raises(DurationError, match="empty duration"):
        parse_duration("   ")
    with pytest.raises(DurationError, match=r"no amounts found in duration '-'"):
        parse_duration("-")


def test_non_string_input_is_rejected():
    with pytest.raises(DurationError, match="expected a string, got 5"):
        parse_duration(5)


def test_iso_hours_and_minutes():
    assert parse_duration("PT1H30M").milliseconds == 5_400_000


def test_iso_days_and_time():
    assert parse_duration("P2DT3H").milliseconds == (2 * 24 + 3) * 3_600_000
    assert parse_iso("P1W").milliseconds == 7 * 86_400_000


def test_iso_fractional_seconds_with_dot_or_comma():
    assert parse_iso("PT1.5S").milliseconds == 1_500
    assert parse_iso("PT0,25S").milliseconds == 250


def test_iso_negative_and_lowercase():
    assert parse_duration("-PT1M").milliseconds == -60_000
    assert parse_duration("pt2m").milliseconds == 120_000


def test_iso_years_and_months_are_rejected():
    with pytest.raises(DurationError, match=r"years and months are not supported in 'P1Y'"):
        parse_iso("P1Y")
    with pytest.raises(DurationError, match="years and months"):
        parse_iso("P2M")


def test_iso_minutes_after_t_are_not_months():
    assert parse_iso("P1DT2M").milliseconds == 86_400_000 + 120_000


def test_iso_without_components_is_rejected():
    with pytest.raises(DurationError, match=r"'P' has no components"):
        parse_iso("P")


def test_iso_t_without_time_is_rejected():
    with pytest.raises(DurationError, match="has a 'T' without time components"):
        parse_iso("P1DT")


def test_iso_malformed_is_rejected():
    with pytest.raises(DurationError, match=r"invalid ISO-8601 duration 'PT1X'"):
        parse_duration("PT1X")


def test_clock_hours_minutes_seconds():
    assert parse_duration("1:30:00").milliseconds == 5_400_000
    assert parse_clock("26:00:00").milliseconds == 26 * 3_600_000


def test_clock_minutes_seconds():
    assert parse_duration("4:05").milliseconds == 245_000
    assert parse_clock("90:00").milliseconds == 90 * 60_000


def test_clock_fraction_and_sign():
    assert parse_clock("0:00:01.5").milliseconds == 1_500
    assert parse_clock("0:00:01.025").milliseconds == 1_025
    assert parse_duration("-0:30").milliseconds == -30_000


def test_clock_out_of_range_fields_are_rejected():
    with pytest.raises(DurationError, match=r"minutes out of range in '1:60:00'"):
        parse_clock("1:60:00")
    with pytest.raises(DurationError, match=r"seconds out of range in '1:75'"):
        parse_clock("1:75")
    with pytest.raises(DurationError, match=r"seconds out of range in '0:00:60'"):
        parse_clock("0:00:60")


def test_clock_malformed_is_rejected():
    with pytest.raises(DurationError, match=r"invalid clock duration '1:2:3'"):
        parse_duration("1:2:3")

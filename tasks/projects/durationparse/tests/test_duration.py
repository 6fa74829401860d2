from decimal import Decimal

import pytest
from durationparse import Duration, DurationError, canonical_unit, sum_durations


def test_from_parts_mixes_units():
    duration = Duration.from_parts(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)
    assert duration.milliseconds == 93_784_005


def test_from_parts_accepts_fractions_and_weeks():
    assert Duration.from_parts(days=0.5).milliseconds == 43_200_000
    assert Duration.from_parts(weeks=1, seconds=Decimal("0.25")).milliseconds == 604_800_250


def test_from_parts_rejects_bad_numbers():
    with pytest.raises(DurationError, match="invalid number 'abc'"):
        Duration.from_parts(hours="abc")
    with pytest.raises(DurationError, match="invalid number inf"):
        Duration.from_parts(seconds=float("inf"))


def test_constructor_requires_integer_milliseconds():
    with pytest.raises(DurationError, match=r"milliseconds must be an int, got 1\.5"):
        Duration(1.5)
    with pytest.raises(DurationError, match="got True"):
        Duration(True)


def test_zero_and_truthiness():
    assert Duration().milliseconds == 0
    assert Duration.zero() == Duration(0)
    assert not Duration.zero()
    assert Duration(1)


def test_total_seconds_and_sign():
    assert Duration(1_500).total_seconds == 1.5
    assert Duration(-1).is_negative
    assert not Duration(0).is_negative


def test_split_with_default_largest_unit():
    assert Duration(93_784_005).split() == [("d", 1), ("h", 2), ("m", 3), ("s", 4), ("ms", 5)]


def test_split_with_smaller_largest_unit():
    assert Duration(2 * 86_400_000 + 1).split("hours") == [("h", 48), ("m", 0), ("s", 0), ("ms", 1)]


def test_split_with_weeks_and_negative_value():
    assert Duration(-8 * 86_400_000).split("w") == [("w", 1), ("d", 1), ("h", 0), ("m", 0), ("s", 0), ("ms", 0)]


def test_addition_and_subtraction():
    assert Duration(1_000) + Duration(250) == Duration(1_250)
    assert Duration(1_000) - Duration(2_500) == Duration(-1_500)


def test_adding_a_number_is_a_type_error():
    with pytest.raises(TypeError):
        Duration(1_000) + 5
    with pytest.raises(TypeError):
        Duration(1_000) - 5


def test_unary_operators():
    assert -Duration(300) == Duration(-300)
    assert +Duration(300) == Duration(300)
    assert abs(Duration(-300)) == Duration(300)


def test_multiplication_rounds_half_even():
    assert Duration(1_000) * 3 == Duration(3_000)
    assert 2 * Duration(1_500) == Duration(3_000)
    assert Duration(5) * 0.5 == Duration(2)
    assert Duration(7) * Decimal("0.5") == Duration(4)


def test_multiplication_by_bool_or_string_is_a_type_error():
    with pytest.raises(TypeError):
        Duration(5) * True
    with pytest.raises(TypeError):
        Duration(5) * "2"


def test_division_by_number():
    assert Duration(10_000) / 4 == Duration(2_500)
    assert Duration(10) / 4 == Duration(2)
    assert Duration(10) / Decimal("0.5") == Duration(20)


def test_division_by_duration_gives_ratio():
    assert Duration(90_000) / Duration(60_000) == 1.5


def test_division_by_zero_is_rejected():
    with pytest.raises(DurationError, match="zero duration"):
        Duration(5) / Duration(0)
    with pytest.raises(DurationError, match=r"cannot divide Duration\(milliseconds=5\) by zero"):
        Duration(5) / 0


def test_division_by_string_is_a_type_error():
    with pytest.raises(TypeError):
        Duration(5) / "2"


def test_ordering_and_sorting():
    items = [Duration(300), Duration(-5), Duration(20)]
    assert sorted(items) == [Duration(-5), Duration(20), Duration(300)]
    assert Duration(1) < Duration(2)
    assert Duration(2) >= Duration(2)
    assert max(items) == Duration(300)


def test_sum_durations():
    assert sum_durations([]) == Duration(0)
    assert sum_durations([Duration(1), Duration(2), Duration(-10)]) == Duration(-7)


def test_sum_durations_rejects_other_values():
    with pytest.raises(DurationError, match="not a Duration: 3"):
        sum_durations([Duration(1), 3])


def test_canonical_unit_spellings():
    assert canonical_unit("Minutes") == "m"
    assert canonical_unit(" wks ") == "w"
    assert canonical_unit("day") == "d"
    assert canonical_unit("MS") == "ms"


def test_canonical_unit_rejects_unknown():
    with pytest.raises(DurationError, match="unknown duration unit 'fortnight'"):
        canonical_unit("fortnight")


def test_canonical_unit_singular_names():
    assert canonical_unit("hour") == "h"
    assert canonical_unit("Seconds") == "s"
    assert canonical_unit("week") == "w"
    assert canonical_unit("minute") == "m"
    assert canonical_unit("millisecond") == "ms"

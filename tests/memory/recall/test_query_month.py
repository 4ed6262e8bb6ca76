"""Month arithmetic of the time words: December's "this month" ends in next January (a search run
on 1 December raised ValueError before)."""

from datetime import datetime

from memory.recall.query import _month


def test_month_steps_across_year_ends():
    assert _month(datetime(2026, 12, 1, 9), -1) == datetime(2027, 1, 1)
    assert _month(datetime(2026, 12, 15), 0) == datetime(2026, 12, 1)
    assert _month(datetime(2026, 1, 5), 1) == datetime(2025, 12, 1)
    assert _month(datetime(2026, 3, 5), 14) == datetime(2025, 1, 1)

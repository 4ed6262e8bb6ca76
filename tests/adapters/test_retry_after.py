"""Retry-After parsing and the pause it leads to (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from adapters.retry_after import parse_retry_after, retry_delay

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_delta_seconds_and_http_dates():
    assert parse_retry_after("120", NOW) == 120.0
    assert parse_retry_after(" 7 ", NOW) == 7.0
    assert parse_retry_after("Tue, 01 Dec 2026 10:00:30 GMT", NOW) == 30.0
    assert parse_retry_after("Tue, 01 Dec 2026 09:59:00 GMT", NOW) == 0.0  # already past: no wait
    assert parse_retry_after(None, NOW) is None
    for junk in ("", "soon", "-5", "1.5", "Tue, 99 Foo 2026"):
        assert parse_retry_after(junk, NOW) is None


@given(st.integers(min_value=0, max_value=10**9))
def test_delta_seconds_round_trip(seconds):
    assert parse_retry_after(str(seconds), NOW) == float(seconds)


@given(st.integers(min_value=0, max_value=10**6))
def test_http_date_round_trips(seconds):
    when = NOW + timedelta(seconds=seconds)
    assert parse_retry_after(format_datetime(when, usegmt=True), NOW) == float(seconds)


@given(st.text(max_size=60))
def test_any_header_is_none_or_a_wait(value):
    parsed = parse_retry_after(value, NOW)
    assert parsed is None or parsed >= 0


@given(st.none() | st.floats(min_value=0, max_value=1e9), st.floats(min_value=0, max_value=100),
       st.floats(min_value=0, max_value=600))
def test_delay_is_what_was_asked_within_backoff_and_cap(asked, backoff, cap):
    delay = retry_delay(asked, backoff, cap)
    assert 0 <= delay <= cap
    assert delay == min(cap, backoff if asked is None else max(asked, backoff))

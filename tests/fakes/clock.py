"""A fake clock tests move by hand: wall time and monotonic time advance together."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

DEFAULT_START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


class FakeClock:
    """Wall and monotonic time that only move when a test says so."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self._now = _aware(start)
        # Monotonic time starts at an arbitrary positive value, like the real one.
        self._monotonic = 1000.0

    def now(self) -> datetime:
        """Current timezone-aware UTC time."""
        return self._now

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; moves with advance() only."""
        return self._monotonic

    def time(self) -> float:
        """Current time as a POSIX timestamp (stand-in for time.time)."""
        return self._now.timestamp()

    def advance(self, **delta: float) -> datetime:
        """Move both clocks forward by timedelta(**delta); returns the new now()."""
        step = timedelta(**delta)
        if step < timedelta(0):
            raise ValueError("FakeClock.advance cannot go backwards; use set()")
        self._now += step
        self._monotonic += step.total_seconds()
        return self._now

    def set(self, dt: datetime) -> None:
        """Jump wall time to dt; monotonic time moves forward only, never back."""
        dt = _aware(dt)
        forward = (dt - self._now).total_seconds()
        if forward > 0:
            self._monotonic += forward
        self._now = dt


def _aware(dt: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)

"""When a reminder is due: a first time, and for a repeating one the rule that gives the next.

Everything is pure: `now` and the zone are arguments, no clock is read. Repeating reminders are
kept as a local wall time (hour, minute) and a rule, so a daily 8:00 stays 8:00 local across a
daylight-saving change. A local time a spring-forward gap skips (02:30 on the night clocks jump
from 02:00 to 03:00) is due at the first real time after the gap; a time a fall-back hour repeats
is due at its first occurrence (zoneinfo's fold=0 both ways).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

Every = Literal["day", "weekdays", "week"]
EVERY_VALUES: tuple[str, ...] = ("day", "weekdays", "week")


def zone_named(name: str) -> ZoneInfo | None:
    """The IANA zone of that name ("Asia/Shanghai", "UTC"), or None when there is none."""
    name = name.strip()
    if not name or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        return ZoneInfo(name)
    except (ValueError, OSError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        return None


def wall(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    """The instant (aware, UTC) a local wall time names; a time in a DST gap moves past the gap."""
    local = datetime.combine(day, time(hour, minute), tzinfo=zone)
    # Round trip through UTC: a nonexistent local time comes back as the real one after the gap.
    return local.astimezone(UTC)


def _matches(every: Every, weekday: int, day: date) -> bool:
    if every == "day":
        return True
    if every == "weekdays":
        return day.weekday() < 5
    return day.weekday() == weekday


@dataclass(frozen=True, slots=True)
class Schedule:
    """A reminder's timing: `first` due instant (aware), and for a repeating one its rule.

    A repeating schedule is due at `hour:minute` local time in `zone` on the days its rule names
    (every day, Monday to Friday, or every week on `first`'s weekday).
    """

    first: datetime
    zone: str
    every: Every | None = None
    hour: int = 0
    minute: int = 0

    @property
    def weekday(self) -> int:
        return self.first.astimezone(ZoneInfo(self.zone)).weekday()

    @property
    def local_first(self) -> datetime:
        return self.first.astimezone(ZoneInfo(self.zone))

    def next_after(self, after: datetime) -> datetime | None:
        """The first due instant strictly after `after` (None for a one-off)."""
        if self.every is None:
            return None
        return next_occurrence(self.every, self.hour, self.minute, self.weekday, ZoneInfo(self.zone), after)


def next_occurrence(every: Every, hour: int, minute: int, weekday: int, zone: ZoneInfo, after: datetime) -> datetime:
    """The first local `hour:minute` on a day the rule names, strictly after `after` (aware UTC)."""
    day = after.astimezone(zone).date()
    for _ in range(9):  # a weekly rule matches within 7 days; 9 covers a day the gap moved past `after`
        if _matches(every, weekday, day):
            at = wall(day, hour, minute, zone)
            if at > after:
                return at
        day += timedelta(days=1)
    raise AssertionError("no occurrence within 9 days")  # unreachable for the three rules


def first_occurrence(every: Every, hour: int, minute: int, weekday: int, zone: ZoneInfo, now: datetime) -> datetime:
    """The first due instant of a new repeating reminder: the next one after `now`."""
    return next_occurrence(every, hour, minute, weekday, zone, now)

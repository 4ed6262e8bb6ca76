"""/pulse's pieces: the stdlib PNG encoder (decoded back by pypng, an independent decoder), the
period parser, and the text summary over the real pulse SQL on a DuckDB file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import png
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.turn.views.png import encode_rgb
from bot.turn.views.pulse import PALETTE, parse_period, pulse_png, pulse_text, window
from memory.store.pulse import Pulse, PulseBucket, pulse
from memory.store.rows import utc_naive


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.data())
def test_png_round_trips_through_an_independent_decoder(w, h, data):
    rows = [bytearray(data.draw(st.binary(min_size=3 * w, max_size=3 * w))) for _ in range(h)]
    width, height, pixels, info = png.Reader(bytes=encode_rgb(w, h, rows)).asRGB8()
    assert (width, height) == (w, h)
    assert [bytes(r) for r in pixels] == [bytes(r) for r in rows]


def test_png_refuses_rows_of_the_wrong_size():
    with pytest.raises(ValueError):
        encode_rgb(2, 1, [bytearray(5)])


@pytest.mark.parametrize(("arg", "days"), [("", 7), ("7d", 7), (" 30D ", 30), ("90d", None), ("week", None)])
def test_period(arg, days):
    assert parse_period(arg) == days


def test_window_covers_today_and_the_days_before():
    since, until = window(datetime(2026, 3, 10, 15, 30, tzinfo=UTC), 7)
    assert since == datetime(2026, 3, 4, tzinfo=UTC) and until == datetime(2026, 3, 11, tzinfo=UTC)


def _seed(store, now):
    rows = [("work", 0, ["trip"]), ("work", 0, ["trip", "plan"]), ("work", 2, []), ("family", 2, ["kids"]),
            (None, 5, []), ("work", 9, [])]  # the last one falls outside a 7-day window
    for i, (cat, ago, tags) in enumerate(rows):
        store.write(lambda c, i=i, cat=cat, ago=ago, tags=tags: c.execute(
            "INSERT INTO memories (id, space_id, kind, title, text, search_text, category, tags, created_at, updated_at) "
            "VALUES (?, 'u_a', 'fact', '', ?, '', ?, ?, ?, ?)",
            [f"f_{i:012x}", f"memory {i}", cat, tags, *[utc_naive(now - timedelta(days=ago))] * 2]))
    store.write(lambda c: c.execute(
        "INSERT INTO memories (id, space_id, kind, title, text, search_text, category, created_at, updated_at) "
        "VALUES ('f_bbbbbbbbbbbb', 'u_b', 'fact', '', 'not mine', '', 'secret', ?, ?)", [utc_naive(now)] * 2))


def test_summary_counts_per_day_top_categories_and_tags(store):
    now = datetime(2026, 3, 10, 12, tzinfo=UTC)
    _seed(store, now)
    since, until = window(now, 7)
    p = store.read(lambda c: pulse(c, "u_a", since, until, "day"))
    text = pulse_text(p, 7)
    lines = text.splitlines()
    assert lines[0] == "Memory pulse, last 7 days: 5 new memories."
    assert len([line for line in lines if line[:3] in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")]) == 7
    assert "Tue 03-10  ▇▇▇▇▇▇▇▇ 2" in lines and "Sun 03-08  ▇▇▇▇▇▇▇▇ 2" in lines
    assert "Thu 03-05  ▇▇▇▇ 1" in lines and "Mon 03-09  0" in lines
    assert f"Top categories: {PALETTE[0][0]} work 3, {PALETTE[1][0]} family 1, {PALETTE[2][0]} uncategorised 1" in text
    assert "Top tags: #trip 2, #kids 1, #plan 1" in text
    assert "secret" not in text and "not mine" not in text  # another space never shows
    caption = pulse_text(p, 7, with_days=False)
    assert "Tue 03-10" not in caption and "work 3" in caption


def test_an_empty_period_says_so(store):
    now = datetime(2026, 3, 10, tzinfo=UTC)
    p = store.read(lambda c: pulse(c, "u_nobody", *window(now, 30), "day"))
    assert pulse_text(p, 30) == "Memory pulse, last 30 days: nothing new remembered."


def test_chart_stacks_categories_in_the_legend_colours():
    day = datetime(2026, 3, 1)
    p = Pulse((PulseBucket(day, 3, {"fact": 3}, {"work": 2, "family": 1}),
               PulseBucket(day + timedelta(days=1), 0, {}, {})), (), 3)
    width, height, rows, _ = png.Reader(bytes=pulse_png(p)).asRGB8()
    pixels = {tuple(r[i:i + 3]) for r in rows for i in range(0, len(r), 3)}
    assert (width, height) == (640, 320)
    assert PALETTE[0][1] in pixels and PALETTE[1][1] in pixels and PALETTE[2][1] not in pixels

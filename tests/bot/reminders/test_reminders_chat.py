"""Reminders on the whole bot (commands, store, delivery through the outbox), English and Chinese:
set, list, cancel, receive; the questions asked; the restart case (one late reminder, never twice).
The transcripts are the ones bench/reminders_transcript.py prints."""

from __future__ import annotations

import pytest

from tests.bot.reminders.transcript import restart_late, set_list_cancel_receive

pytestmark = pytest.mark.timeout(600)  # whole gateways on a shared machine; nothing here is timed


def _said(lines: list[str], who: str, start: str) -> list[str]:
    return [ln.split(f"] {who}: ", 1)[1] for ln in lines if f"] {who}: " in ln and ln.split(f"] {who}: ", 1)[1].startswith(start)]


async def test_set_list_cancel_and_receive_in_english_and_chinese(tmp_path, embedder):
    lines = await set_list_cancel_receive(tmp_path, embedder)
    text = "\n".join(lines)
    # The exact local date and time understood, in the person's zone.
    assert "OK, I'll remind you on Wed 2026-05-06 10:10 (Asia/Shanghai): drink water. [#1]" in text
    assert "OK, I'll remind you on Thu 2026-05-07 09:00 (Asia/Shanghai): call mum. [#2]" in text
    assert "every Monday at 08:00 (Asia/Shanghai) I'll remind you: water the plants. First on Mon 2026-05-11 08:00" in text
    assert "好的，我会在 2026-05-08（周五）15:00（Asia/Shanghai）提醒你：交报告。[#5]" in text
    assert "好的，每周一 08:00（Asia/Shanghai）提醒你：浇花。第一次是 2026-05-11（周一）08:00。[#6]" in text
    # Asked, not guessed: no time of day, am or pm, a time already past.
    assert "At what time tomorrow?" in text
    assert "Did you mean Wed 2026-05-06 21:00 or Thu 2026-05-07 09:00?" in text
    assert "Wed 2026-05-06 09:00 has already passed." in text
    assert "你是说 2026-05-07（周四）09:00 还是 2026-05-07（周四）21:00？" in text
    # Listed with ids; cancelled ones never come.
    assert "#3 Mon 2026-05-11 08:00 (every Monday at 08:00) — water the plants" in text
    assert "Cancelled #2 (Thu 2026-05-07 09:00): call mum" in text and "已取消 #6" in text
    reminders = [ln for ln in lines if "⏰" in ln]
    assert [r.split("] bot: ")[0] for r in reminders] == ["[Wed 05-06 10:10", "[Wed 05-06 10:20", "[Fri 05-08 15:00",
                                                           "[Mon 05-11 08:00"]
    assert "call mum" not in " ".join(reminders) and "浇花" not in " ".join(reminders)
    assert "next on Mon 2026-05-18 08:00" in text   # the weekly one moved on, in local time
    assert not any("Late" in r or "晚了" in r for r in reminders)


async def test_a_reminder_missed_while_stopped_is_sent_once_at_start_saying_it_is_late(tmp_path, embedder):
    lines = await restart_late(tmp_path, embedder, ahead=2, down=3)
    late = [ln for ln in lines if "⏰" in ln]
    assert len(late) == 1 and late[0].startswith("[Wed 05-06 10:03] bot: ⏰ Reminder: take the cake out")
    text = "\n".join(lines)
    assert "(Late by 1 minute: it was due at 10:02; I was not running then.)" in text
    assert "sent in the third run: 0 (nothing twice)" in text

"""What the bot says about reminders, in English or Chinese (the language the person used).

Every time shown is local, in the reminder's zone, with the date and weekday spelled out: the
person sees exactly what the bot understood.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from bot.reminders.schedule import Schedule, zone_named
from bot.reminders.when import Unclear

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_EN_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_EN_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ZH_DAYS = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")


def lang_of(*texts: str) -> str:
    """"zh" when any of the texts has a Chinese character, else "en"."""
    return "zh" if any(_CJK.search(t or "") for t in texts) else "en"


def local(at: datetime, zone: str) -> datetime:
    return at.astimezone(ZoneInfo(zone))


def day_time(at: datetime, zone: str, lang: str) -> str:
    """"Thu 2026-05-07 09:00" / "2026-05-07（周四）09:00", in the zone."""
    t = local(at, zone)
    if lang == "zh":
        return f"{t:%Y-%m-%d}（{_ZH_DAYS[t.weekday()]}）{t:%H:%M}"
    return f"{_EN_DAYS[t.weekday()]} {t:%Y-%m-%d} {t:%H:%M}"


def rule_text(s: Schedule, lang: str) -> str:
    """"every Monday at 08:00" / "每周一 08:00"; "" for a one-off."""
    at = f"{s.hour:02d}:{s.minute:02d}"
    if s.every is None:
        return ""
    if lang == "zh":
        return {"day": f"每天 {at}", "weekdays": f"每个工作日 {at}", "week": f"每{_ZH_DAYS[s.weekday]} {at}"}[s.every]
    return {"day": f"every day at {at}", "weekdays": f"every weekday (Mon-Fri) at {at}",
            "week": f"every {_EN_DAY_NAMES[s.weekday]} at {at}"}[s.every]


def duration(d: timedelta, lang: str) -> str:
    """"1 hour 5 minutes" / "1 小时 5 分钟" (whole minutes; seconds under a minute)."""
    secs = max(0, int(d.total_seconds()))
    if secs < 60:
        return f"{secs} 秒" if lang == "zh" else f"{secs} second{'s' * (secs != 1)}"
    days, rest = divmod(secs // 60, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [(days, "day", "天"), (hours, "hour", "小时"), (minutes, "minute", "分钟")]
    if lang == "zh":
        return " ".join(f"{n} {zh}" for n, _, zh in parts if n)
    return " ".join(f"{n} {en}{'s' * (n != 1)}" for n, en, _ in parts if n)


def set_text(rid: int, what: str, s: Schedule, now: datetime, lang: str, window_hours: float | None = None) -> str:
    """The answer to a reminder set: the exact local date and time understood."""
    zone = s.zone
    when = day_time(s.first, zone, lang)
    if lang == "zh":
        text = (f"好的，{rule_text(s, lang)}（{zone}）提醒你：{what}。第一次是 {when}。[#{rid}]" if s.every else
                f"好的，我会在 {when}（{zone}）提醒你：{what}。[#{rid}]")
    else:
        text = (f"OK, {rule_text(s, lang)} ({zone}) I'll remind you: {what}. First on {when}. [#{rid}]" if s.every else
                f"OK, I'll remind you on {when} ({zone}): {what}. [#{rid}]")
    if window_hours is not None and (s.every is not None or s.first - now > timedelta(hours=window_hours)):
        text += "\n" + window_text(window_hours, lang)
    return text


def window_text(hours: float, lang: str) -> str:
    if lang == "zh":
        return (f"注意：公众号只能在你最后一次发消息后的 {hours:g} 小时内给你发消息。提醒时间之前 {hours:g} 小时内给我发一条消息，"
                "提醒才能送到。")
    return (f"Note: this Official Account can write to you only within {hours:g} hours of your last message, so this "
            f"reminder may not arrive unless you write to me in the {hours:g} hours before it.")


def ask_text(u: Unclear, lang: str) -> str:
    """The question the bot asks when WHEN is unclear or past."""
    when, what = u.when or "…", u.what or ("交报告" if lang == "zh" else "call mum")
    opts = [day_time(o.first, o.zone, lang) for o in u.options]
    zh = lang == "zh"
    if u.kind == "no_time":
        return (f"“{when}”几点？例如：/remind {when}上午9点 {what}" if zh else
                f"At what time {when}? For example: /remind {when} 9:00 {what}")
    if u.kind == "am_pm":
        return (f"你是说 {opts[0]} 还是 {opts[1]}？请写明上午/下午，或用 24 小时制（如 21:00）。" if zh else
                f"Did you mean {opts[0]} or {opts[1]}? Add am/pm or use 24-hour time (21:00).")
    if u.kind == "day_month":
        return (f"“{when}”是 {opts[0]} 还是 {opts[1]}？请写成 2026-03-04 这样的日期。" if zh else
                f"Is “{when}” {opts[0]} or {opts[1]}? Please write the date as 2026-03-04 or Mar 4.")
    if u.kind == "past":
        return (f"{opts[0] if opts else when} 已经过去了。要我什么时候提醒你？" if zh else
                f"{opts[0] if opts else when} has already passed. When should I remind you?")
    if u.kind == "bad_date":
        return f"没有这个日期或时间：“{when}”。" if zh else f"There is no such date or time: “{when}”."
    if u.kind == "no_what":
        return f"要提醒你什么？例如：/remind {when} {what}" if zh else f"What should I remind you of? For example: /remind {when} {what}"
    return USAGE_ZH if zh else USAGE_EN


USAGE_EN = ("Usage: /remind WHEN WHAT, e.g. /remind in 10 minutes tea, /remind tomorrow 9:00 call mum, "
            "/remind friday 15:00 report, /remind every monday 8:00 water the plants, /remind 2026-12-24 18:00 dinner")
USAGE_ZH = "用法：/remind 时间 内容，例如 /remind 10分钟后 喝水，/remind 明天上午9点 交报告，/remind 每周一早上8点 浇花"


def list_text(reminders: Sequence, zone: str, lang: str) -> str:
    """/reminders: each active one with its id, next local time and rule."""
    if not reminders:
        return "你没有待提醒的事项。设置一个：/remind 明天上午9点 交报告" if lang == "zh" else \
            "You have no reminders. Set one with /remind tomorrow 9:00 call mum"
    lines = []
    for r in reminders:
        rule = rule_text(r.schedule, lang)
        when = day_time(r.due_at, r.schedule.zone, lang)
        if lang == "zh":
            lines.append(f"#{r.id} {when}{f'（{rule}）' if rule else ''} — {r.text}")
        else:
            lines.append(f"#{r.id} {when}{f' ({rule})' if rule else ''} — {r.text}")
    head = f"你的提醒（{zone}）：" if lang == "zh" else f"Your reminders ({zone}):"
    tail = "取消：/reminders cancel ID" if lang == "zh" else "Cancel one with /reminders cancel ID"
    return "\n".join([head, *lines, tail])


def cancelled_text(r, lang: str) -> str:
    when = day_time(r.due_at, r.schedule.zone, lang)
    return f"已取消 #{r.id}（{when}）：{r.text}" if lang == "zh" else f"Cancelled #{r.id} ({when}): {r.text}"


def due_text(what: str, s: Schedule, due: datetime, late: timedelta | None, was_down: bool,
             next_at: datetime | None) -> str:
    """The reminder itself; a late one says by how much, and why when memgate was not running."""
    lang = lang_of(what)
    zh = lang == "zh"
    text = f"⏰ 提醒：{what}" if zh else f"⏰ Reminder: {what}"
    if late is not None:
        at = local(due, s.zone).strftime("%H:%M")
        if local(due, s.zone).date() != local(due + late, s.zone).date():
            at = day_time(due, s.zone, lang)
        if zh:
            text += f"\n（晚了 {duration(late, lang)}：原定 {at}{'，那时我没有在运行' if was_down else ''}。）"
        else:
            text += f"\n(Late by {duration(late, lang)}: it was due at {at}{'; I was not running then' if was_down else ''}.)"
    if next_at is not None:
        text += (f"\n（{rule_text(s, lang)}；下次 {day_time(next_at, s.zone, lang)}）" if zh else
                 f"\n({rule_text(s, lang)}; next on {day_time(next_at, s.zone, lang)})")
    return text


def local_now(now: datetime, zone: str) -> str:
    """"2026-05-06 10:00 (Wednesday), time zone Asia/Shanghai": the agent's prompt line."""
    z = zone_named(zone)
    t = now.astimezone(z) if z is not None else now
    return f"{t:%Y-%m-%d %H:%M} ({t:%A}), time zone {zone}"


def reminder_json(r) -> dict:
    """A reminder as the HTTP API and the MCP tools show it (local time spelled out, and UTC)."""
    s = r.schedule
    d = {"id": r.id, "what": r.text, "due_at": r.due_at.isoformat(), "local": day_time(r.due_at, s.zone, "en"),
         "zone": s.zone, "every": s.every, "status": r.status, "channel": r.address.channel,
         "created_at": r.created_at.isoformat()}
    if s.every:
        d["repeats"] = rule_text(s, "en")
    return d

"""Reminders in the turn: the chat commands (/remind, /reminders, /timezone, /followups), the
agent's tools (create, list, cancel) and the person's local time in the agent's prompt."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.reminders.delivery import DeliverySettings, ReminderDelivery
from bot.reminders.followups import FollowUps
from bot.reminders.desk import ReminderDesk
from bot.reminders.schedule import zone_named
from bot.reminders.store import Address, ReminderStore
from bot.reminders.views import USAGE_EN, USAGE_ZH, day_time, lang_of, rule_text
from bot.scheduler import JobSpec
from bot.turn.tools import ToolBox, ToolContext, function_schema

if TYPE_CHECKING:
    from bot.message import Message
    from bot.settings import RemindersConfig
    from bot.turn.gateway import Gateway
    from memory.store.connection import Store
    from bot.turn.agent import Agent
    from bot.turn.commands import CommandContext, Commands

REMINDER_TOOL_SCHEMAS = (
    function_schema("reminder_create", "Set a reminder the bot sends to this chat at a time (when the user asks to be "
        "reminded). 'when' in the user's words or as local ISO time: 'in 10 minutes', 'tomorrow 9:00', 'friday 15:00', "
        "'every monday 8:00', '明天上午9点', '2026-12-24T18:00'. If the result asks a question, ask the user.",
        {"when": {"type": "string"}, "what": {"type": "string", "description": "what to remind of, short"}},
        ["when", "what"]),
    function_schema("reminder_list", "List this user's active reminders with their ids and local times.", {}, []),
    function_schema("reminder_cancel", "Cancel one of the user's reminders by id (find the id with reminder_list).",
        {"id": {"type": "integer"}}, ["id"]),
)

FOLLOWUP_EVERY_MINUTES = 10   # how often the follow-up pass looks (it asks at most once a day per person)
ZONE_HELP = "Use an IANA time zone name such as Asia/Shanghai, Europe/Berlin or America/New_York."


def address_of(msg: Message) -> Address:
    return Address(msg.channel, msg.chat_id, msg.thread_id, msg.sender_id)


def _reminder_json(r, lang: str = "en") -> dict[str, Any]:
    out = {"id": r.id, "what": r.text, "next": day_time(r.due_at, r.schedule.zone, lang), "zone": r.schedule.zone}
    if r.schedule.every:
        out["repeats"] = rule_text(r.schedule, lang)
    return out


def wire_reminders(config: RemindersConfig, store: Store, clock: Callable[[], datetime], gateway: Gateway,
                   commands: Commands, tools: ToolBox) -> dict[str, Any]:
    """Reminders (issue 34): their store, their delivery through the gateway's outbox, the commands and
    tools, the person's local time in the agent's prompt. Returns the app's extras: the desk and the
    delivery (started by the app after the channels)."""
    reminders = ReminderStore(store, clock=clock, default_zone=config.timezone)
    delivery = ReminderDelivery(store, gateway.outbox, gateway.channels, clock=clock,
                                settings=DeliverySettings(poll_seconds=config.poll_seconds,
                                                          late_after_seconds=config.late_after_seconds))
    desk = ReminderDesk(reminders, clock=clock, channels=gateway.channels, delivery=delivery)
    register_reminders(desk, tools, commands, gateway.agent)
    followups = FollowUps(store, gateway.outbox, clock=clock, default_zone=config.timezone,
                          quiet_hours=config.quiet_hours, within_days=config.followup_days)
    job = JobSpec("followups", followups.run, timedelta(minutes=FOLLOWUP_EVERY_MINUTES))
    return {"reminders": desk, "reminder_delivery": delivery, "followups": followups, "reminder_jobs": [job]}


def register_reminders(desk: ReminderDesk, tools: ToolBox, commands: Commands, agent: Agent | None) -> None:
    """Register the reminder commands and tools, and give the agent the person's local time."""

    async def remind(ctx: CommandContext) -> str:
        if not ctx.args:
            return USAGE_ZH if lang_of(ctx.msg.text) == "zh" else USAGE_EN
        got = await desk.set(ctx.allowed.write_space, address_of(ctx.msg), ctx.allowed.identity.key, text=ctx.args,
                             direct=not ctx.msg.is_group)
        return got.answer

    async def reminders(ctx: CommandContext) -> str:
        verb, _, rest = ctx.args.partition(" ")
        lang = lang_of(ctx.msg.text)
        if verb.lower() in ("cancel", "取消", "delete", "rm"):
            m = re.fullmatch(r"#?(\d+)", rest.strip())
            if m is None:
                return "用法：/reminders cancel ID" if lang == "zh" else "Usage: /reminders cancel ID (the #number in /reminders)"
            return (await desk.cancel(int(m.group(1)), _spaces(ctx), lang))[1]
        if verb:
            return "用法：/reminders 或 /reminders cancel ID" if lang == "zh" else "Usage: /reminders, or /reminders cancel ID"
        return await desk.listing(_spaces(ctx), ctx.allowed.write_space, lang)

    async def timezone(ctx: CommandContext) -> str:
        space = ctx.allowed.write_space
        if not ctx.args:
            zone = await desk.zone(space)
            return f"Your time zone is {zone.key}; it is {desk.clock().astimezone(zone):%Y-%m-%d %H:%M} there. " \
                   f"Change it with /timezone ZONE. {ZONE_HELP}"
        zone = zone_named(ctx.args.split()[0])
        if zone is None:
            return f"I don't know the time zone “{ctx.args.split()[0][:60]}”. {ZONE_HELP}"
        await desk.store.set_zone(space, zone.key)
        return f"Time zone set to {zone.key} (it is {desk.clock().astimezone(zone):%Y-%m-%d %H:%M} there). " \
               "Reminders you set from now on are read in it."

    async def followups(ctx: CommandContext) -> str:
        arg = ctx.args.strip().lower()
        zh = lang_of(ctx.msg.text) == "zh"
        space = ctx.allowed.write_space
        if arg not in ("on", "off", "开", "关"):
            on = (await desk.store.prefs(space)).followups
            return ("跟进：" + ("开" if on else "关") + "。/followups on：你告诉我的计划（考试、面试……）过后，我会问一次进展如何。" if zh else
                    f"Follow-ups are {'on' if on else 'off'}. /followups on: after a plan or event you told me about "
                    "(an exam, an interview) I ask once how it went.")
        if ctx.msg.is_group:
            return "跟进只在我们的私聊里开启。" if zh else "Follow-ups are for our direct chat only: say /followups on there."
        on = arg in ("on", "开")
        await desk.store.set_followups(space, on, address_of(ctx.msg))
        if zh:
            return "好的，跟进已开启：计划过后我会问一次（每天最多一次，不在休息时间）。" if on else "好的，跟进已关闭。"
        return ("Follow-ups on: the day after a plan or event you told me about, I ask once how it went "
                "(at most one question a day, never in your quiet hours)." if on else "Follow-ups off.")

    commands.register("remind", remind, "/remind WHEN WHAT: remind me, e.g. /remind tomorrow 9:00 call mum")
    commands.register("reminders", reminders, "/reminders [cancel ID]: your reminders, or cancel one")
    commands.register("timezone", timezone, "/timezone [ZONE]: your time zone for reminders, e.g. Asia/Shanghai")
    commands.register("followups", followups, "/followups on|off: ask me how your plans went, once, afterwards")

    async def create(args: dict, ctx: ToolContext) -> Any:
        if ctx.origin is None:
            return {"error": "reminders can only be set from a chat"}
        got = await desk.set(ctx.write_space, address_of(ctx.origin), ctx.speaker, when=str(args["when"]),
                             what=str(args["what"]), direct=ctx.private_chat)
        if got.reminder is None:
            return {"not_set": True, "ask_the_user": got.answer}
        return {**_reminder_json(got.reminder), "tell_the_user": got.answer}

    async def listing(args: dict, ctx: ToolContext) -> Any:
        rows = await desk.store.active(_tool_spaces(ctx))
        return {"reminders": [_reminder_json(r) for r in rows]}

    async def cancel(args: dict, ctx: ToolContext) -> Any:
        r, answer = await desk.cancel(int(args["id"]), _tool_spaces(ctx))
        return {"cancelled": _reminder_json(r)} if r is not None else {"error": answer}

    for schema, handler in zip(REMINDER_TOOL_SCHEMAS, (create, listing, cancel)):
        tools.register(schema, handler)

    if agent is not None:
        async def local_zone(ctx: ToolContext) -> str:
            return (await desk.zone(ctx.write_space)).key

        agent.local_zone = local_zone


def _spaces(ctx: CommandContext) -> tuple[str, ...]:
    """Whose reminders a chat shows: in a direct chat the person's own spaces, in a group the group's."""
    return ctx.allowed.own_spaces if not ctx.msg.is_group else (ctx.allowed.write_space,)


def _tool_spaces(ctx: ToolContext) -> tuple[str, ...]:
    return ctx.own_spaces if ctx.private_chat else (ctx.write_space,)


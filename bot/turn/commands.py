"""Chat commands, answered without the LLM, the same on every channel.

Everyone: /help /whoami /new /memory [query] /remember TEXT /forget ID|query|everything /pin ID /unpin ID
/export /pulse [7d|30d] /link [CODE|yes|no]. Admins: /approve CODE /deny CODE /users /role USER ROLE /block USER
/public [add TEXT|edit ID TEXT|forget ID] /stats /jobs /reindex. Tasks and skills: /tasks /skills
/skill NAME.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.access.identities import Role
from bot.access.linking import Linking
from bot.access.pairing import APPROVED_TEXT, Pairing
from bot.access.policy import Access, Allowed
from bot.channel import MenuCommand
from bot.errors import MemgateError
from bot.message import Image, Message, Reply
from bot.access.erasure import ERASE_CONFIRM, EraseCodes
from bot.turn.own_memory import Exports, forget_everything, kept_text
from bot.turn.tools import ToolContext
from bot.turn.views.link import (
    LINK_ASK_CLAIMANT_TEXT,
    LINK_ASK_ISSUER_TEXT,
    LINK_DONE_CLAIMANT_TEXT,
    LINK_DONE_ISSUER_TEXT,
    LINK_HELP,
    LINK_OFFER_TEXT,
    LINK_OTHER_SAID_YES_TEXT,
    LINK_REFUSED_BY_OTHER_TEXT,
    LINK_REFUSED_TEXT,
    LINK_WAITING_TEXT,
    account,
)
from memory.engine import MemoryEngine
from memory.ingest.capture import pending_count
from memory.recall.block import humanize_age
from memory.text import trim

log = logging.getLogger(__name__)
audit = logging.getLogger("memgate.audit")


class Conversations(Protocol):
    """What commands may ask of the gateway (a Protocol, so commands never import the gateway)."""

    async def new_session(self, msg: Message, allowed: Allowed) -> None:
        """Start a new conversation session for the sender of `msg`."""

    async def tell(self, channel: str, chat_id: str, recipient_id: str, text: str) -> None:
        """Send `text` to a chat other than the one being answered (the outbound path of replies)."""


@dataclass(frozen=True, slots=True)
class CommandContext:
    msg: Message
    allowed: Allowed
    tools: ToolContext
    gateway: Conversations | None = None

    @property
    def args(self) -> str:
        return self.msg.text.strip().partition(" ")[2].strip()


Handler = Callable[[CommandContext], Awaitable["str | Reply"]]


@dataclass
class _Command:
    handler: Handler
    help: str
    admin: bool = False
    menu: bool = True     # on a platform's command menu (a command one channel answers itself is not)


# What memory ids look like (memory.store.rows.new_id): an id that is not the person's own is
# refused, never handed to the fuzzy search (which could then forget an unrelated memory).
_MEMORY_ID = re.compile(r"^[a-z]+_[0-9a-f]{12}$")

# How long a "/forget WORDS" listing waits for its "/forget yes".
FORGET_CONFIRM = timedelta(minutes=5)

HELP_HEADER = "I remember what you tell me and recall it when it matters. Commands:"


@dataclass
class Commands:
    engine: MemoryEngine
    access: Access
    pairing: Pairing
    linking: Linking
    clock: Callable[[], datetime]
    extra: dict[str, Any] = field(default_factory=dict)   # optional: tasks, skills, scheduler, usage
    _table: dict[str, _Command] = field(default_factory=dict, init=False)
    _confirm: dict[str, tuple[datetime, list[str]]] = field(default_factory=dict, init=False)  # per conversation
    _erase_codes: EraseCodes = field(init=False)
    _exports: Exports = field(init=False)

    def __post_init__(self) -> None:
        self._erase_codes = EraseCodes(clock=self.clock, ttl=ERASE_CONFIRM)  # /forget everything's codes
        self._exports = Exports(self.engine, clock=self.clock)
        t = self._table
        t["help"] = _Command(self._help, "/help: this list")
        t["start"] = _Command(self._help, "")
        t["whoami"] = _Command(self._whoami, "/whoami: who I think you are")
        t["new"] = _Command(self._new, "/new: start a new conversation (memories stay)")
        t["memory"] = _Command(self._memory, "/memory [query]: what I remember (about the query)")
        t["remember"] = _Command(self._remember, "/remember TEXT: remember this for good (pinned)")
        t["forget"] = _Command(self._forget, "/forget ID|query|everything: forget a memory, or all I keep about you")
        t["pin"] = _Command(self._pin, "/pin ID: never change or drop this memory automatically")
        t["unpin"] = _Command(self._unpin, "/unpin ID")
        t["export"] = _Command(self._export, "/export [markdown]: all your memory as a file (JSONL, or Markdown to read)")
        t["pulse"] = _Command(self._pulse, "/pulse [7d|30d]: what I remembered day by day")
        t["link"] = _Command(self._link, LINK_HELP)
        t["approve"] = _Command(self._approve, "/approve CODE: let a person in", admin=True)
        t["deny"] = _Command(self._deny, "/deny CODE", admin=True)
        t["public"] = _Command(self._public, "/public [add TEXT | edit ID TEXT | forget ID]: the shared notes "
                               "everyone's recall reads", admin=True)
        t["users"] = _Command(self._users, "/users: people and roles", admin=True)
        t["role"] = _Command(self._role, "/role USER ROLE: owner/admin/user/blocked", admin=True)
        t["block"] = _Command(self._block, "/block USER", admin=True)
        t["stats"] = _Command(self._stats, "/stats: memories, queue, LLM use today", admin=True)
        t["jobs"] = _Command(self._jobs, "/jobs: background jobs", admin=True)
        t["reindex"] = _Command(self._reindex, "/reindex: rebuild the keyword index", admin=True)

    def register(self, name: str, handler: Handler, help_text: str, admin: bool = False, *, menu: bool = True) -> None:
        """Add a command (whenever: the menus are read when the channels start). `menu=False` keeps
        it off the platforms' menus (the terminal's /quit, answered by the terminal alone)."""
        self._table[name] = _Command(handler, help_text, admin, menu)

    def menu(self) -> list[MenuCommand]:
        """The commands everyone may use, for a platform's command menu (admin ones stay off it).

        The description is the help text after "/name ...: ", or the help text itself.
        """
        items = []
        for name, cmd in self._table.items():
            if cmd.admin or not cmd.help or not cmd.menu:
                continue
            usage, sep, description = cmd.help.partition(": ")
            items.append(MenuCommand(name, (description if sep else usage.lstrip("/")).strip()))
        return items

    async def handle(self, ctx: CommandContext) -> str | Reply | None:
        """Answer a /command; None when it is not one of ours (the agent gets the text)."""
        word = ctx.msg.text.strip().split(maxsplit=1)[0][1:].lower()
        name = word.split("@", 1)[0]
        cmd = self._table.get(name)
        if cmd is None:
            return f"Unknown command /{name}. Send /help for the list."
        ident = ctx.allowed.identity
        if cmd.admin:
            if not self.access.is_admin(ident):
                return "Sorry, only the bot's admins can do that."
            audit.info("admin command /%s by %s", name, ident.key)
        try:
            return await cmd.handler(ctx)
        except MemgateError as exc:
            return str(exc)

    # --- everyone --------------------------------------------------------------------------
    async def _help(self, ctx: CommandContext) -> str:
        admin = self.access.is_admin(ctx.allowed.identity)
        lines = [c.help for c in self._table.values() if c.help and (admin or not c.admin)]
        return "\n".join([HELP_HEADER, *lines])

    async def _whoami(self, ctx: CommandContext) -> str:
        i = ctx.allowed.identity
        return f"You are {i.display_name or i.external_id} ({i.key}), role {i.role.value}. Your memory space: {i.space_id}."

    async def _new(self, ctx: CommandContext) -> str:
        if ctx.gateway is not None:
            await ctx.gateway.new_session(ctx.msg, ctx.allowed)
        return "Started a new conversation. I still remember what matters."

    async def _memory(self, ctx: CommandContext) -> str:
        now = self.clock()
        if ctx.args:
            hits = await self.engine.search(ctx.args, ctx.tools.space_ids, limit=10)
            if not hits:
                return f"I found nothing about “{ctx.args}”."
            return "\n".join(f"[{h.id}] {trim(h.text, 200)} ({humanize_age(h.created_at, now)})" for h in hits)
        own = list(ctx.allowed.own_spaces)
        rows = await self.engine.list(own, limit=20)
        kept = await self.engine.erase_counts(own)
        head = kept_text(kept)
        if not rows:
            return f"{head}\nI don't remember any facts about you yet."
        newest = "The newest facts:" if kept.facts > len(rows) else "The facts:"
        return "\n".join([head, newest, *(f"[{r.id}]{' 📌' if r.pinned else ''} {trim(r.text, 200)} "
                                          f"({humanize_age(r.created_at, now)})" for r in rows)])

    async def _remember(self, ctx: CommandContext) -> str:
        if not ctx.args:
            return "Usage: /remember TEXT"
        rec = await self.engine.remember(ctx.args, ctx.allowed.write_space, pinned=True, source="command")
        return f"Remembered [{rec.id}] (pinned)."

    async def _forget(self, ctx: CommandContext) -> str:
        """/forget ID acts at once; /forget WORDS only lists what it would forget and waits for a yes.

        Fuzzy search always has a top hit (scores are normalised to 1.0), so words never delete
        anything by themselves: the person sees the candidates and confirms within FORGET_CONFIRM.
        """
        arg = ctx.args
        if not arg:
            return "Usage: /forget ID, /forget some words, or /forget everything"
        word, _, code = arg.partition(" ")
        if word.lower() == "everything":
            return await forget_everything(self.engine, self._erase_codes, ctx.msg.conversation_key,
                                           ctx.allowed.identity.key, ctx.allowed.own_spaces, ctx.msg.is_group, code.strip())
        own = list(ctx.allowed.own_spaces)
        key = ctx.msg.conversation_key
        now = self.clock()
        pending = self._confirm.pop(key, None)
        if pending is not None and now - pending[0] > FORGET_CONFIRM:
            pending = None
        if arg.lower() in ("yes", "all", "y"):
            if pending is None:
                return "Nothing is waiting to be forgotten. Send /forget ID, or /forget some words to see what matches."
            res = await self.engine.forget(pending[1], own)
            return f"Forgot {len(res.forgotten)} memories."
        if " " not in arg and (await self.engine.get([arg], own)):
            res = await self.engine.forget([arg], own)
            return f"Forgot [{arg}]." if res.forgotten else f"[{arg}] is not one of your memories."
        if _MEMORY_ID.match(arg):
            return f"[{arg}] is not one of your memories."
        hits = [h for h in await self.engine.search(arg, own, limit=5, kinds=("fact", "chunk")) if h.score >= 0.5]
        if not hits:
            return f"I found nothing of yours about “{arg}”."
        self._confirm[key] = (now, [h.id for h in hits])
        listing = "\n".join(f"[{h.id}] {trim(h.text, 120)}" for h in hits)
        minutes = int(FORGET_CONFIRM.total_seconds() // 60)
        which = "it" if len(hits) == 1 else f"all {len(hits)}"
        return (f"I would forget {'this memory' if len(hits) == 1 else 'these memories'}:\n{listing}\n"
                f"Send /forget yes within {minutes} minutes to forget {which}, or /forget ID for one.")

    async def _pin(self, ctx: CommandContext, pinned: bool = True) -> str:
        if not ctx.args:
            return f"Usage: /{'pin' if pinned else 'unpin'} ID"
        ok = await self.engine.set_pinned(ctx.args, list(ctx.allowed.own_spaces), pinned)
        return (f"{'Pinned' if pinned else 'Unpinned'} [{ctx.args}]." if ok else f"[{ctx.args}] is not one of your memories.")

    async def _unpin(self, ctx: CommandContext) -> str:
        return await self._pin(ctx, pinned=False)

    async def _export(self, ctx: CommandContext) -> str | Reply:
        doc = await self._exports.export(ctx.allowed.identity.key, ctx.allowed.own_spaces, ctx.args.strip())
        if isinstance(doc, str):
            return doc
        n = doc.data.count(b"\n" if doc.filename.endswith(".jsonl") else b"\n- ")
        return Reply(channel=ctx.msg.channel, chat_id=ctx.msg.chat_id, thread_id=ctx.msg.thread_id,
                     recipient_id=ctx.msg.sender_id, text=f"Your {n} memories.", document=doc)

    async def _pulse(self, ctx: CommandContext) -> str | Reply:
        """The space's Memory Pulse: a chart (where pictures show) and a text summary."""
        from bot.turn.views.pulse import parse_period, pulse_png, pulse_text, window
        from memory.store.pulse import pulse

        days = parse_period(ctx.args)
        if days is None:
            return "Usage: /pulse [7d|30d]"
        since, until = window(self.clock(), days)
        space = ctx.allowed.write_space
        p = await self.engine.store.aread(lambda c: pulse(c, space, since, until, "day"))
        text = pulse_text(p, days)
        if p.total == 0:
            return text
        png = await asyncio.to_thread(pulse_png, p)
        return Reply(channel=ctx.msg.channel, chat_id=ctx.msg.chat_id, thread_id=ctx.msg.thread_id,
                     reply_to=ctx.msg.message_id, recipient_id=ctx.msg.sender_id, text=text,
                     image=Image(filename=f"pulse-{days}d.png", data=png, caption=pulse_text(p, days, with_days=False)))

    async def _link(self, ctx: CommandContext) -> str:
        ident, arg = ctx.allowed.identity, ctx.args.strip()
        if not arg:
            offer = await self.linking.offer(ident, ctx.msg)
            return LINK_OFFER_TEXT.format(code=offer.code, minutes=offer.minutes)
        if arg.lower() in ("yes", "no"):
            d = await self.linking.decide(ident, ctx.msg, yes=arg.lower() == "yes")
            other, other_chat = d.other
            if d.outcome == "waiting":
                told, answer = LINK_OTHER_SAID_YES_TEXT, LINK_WAITING_TEXT
            elif d.outcome == "refused":
                told, answer = LINK_REFUSED_BY_OTHER_TEXT, LINK_REFUSED_TEXT
            else:
                issuer, claimant = account(d.issuer), account(d.claimant)
                done = {"issuer": LINK_DONE_ISSUER_TEXT.format(claimant=claimant),
                        "claimant": LINK_DONE_CLAIMANT_TEXT.format(issuer=issuer)}
                told, answer = done["claimant" if d.side == "issuer" else "issuer"], done[d.side]
            if ctx.gateway is not None:
                await ctx.gateway.tell(other.channel, other_chat, other.external_id,
                                       told.format(other=account(ctx.allowed.identity)))
            return answer.format(other=account(other))
        claim = await self.linking.claim(arg, ident, ctx.msg)
        if ctx.gateway is not None:
            await ctx.gateway.tell(claim.issuer.channel, claim.issuer_chat_id, claim.issuer.external_id,
                                   LINK_ASK_ISSUER_TEXT.format(claimant=account(claim.claimant), minutes=claim.minutes))
        return LINK_ASK_CLAIMANT_TEXT.format(issuer=account(claim.issuer), minutes=claim.minutes)

    # --- admins ----------------------------------------------------------------------------
    async def _approve(self, ctx: CommandContext) -> str:
        if not ctx.args:
            pending = await self.pairing.pending()
            if not pending:
                return "No pending requests."
            return "Pending:\n" + "\n".join(f"{p.code} {p.display_name or p.external_id} ({p.channel})" for p in pending)
        admitted = await self.pairing.approve(ctx.args.strip().upper(), ctx.allowed.identity)
        ident = admitted.identity
        if ctx.gateway is not None:
            await ctx.gateway.tell(ident.channel, admitted.chat_id, ident.external_id, APPROVED_TEXT)
        return f"Approved {ident.display_name or ident.external_id} ({ident.key}) as {ident.role.value}."

    async def _deny(self, ctx: CommandContext) -> str:
        await self.pairing.deny(ctx.args.strip().upper(), ctx.allowed.identity)
        return "Denied."

    async def _public(self, ctx: CommandContext) -> str:
        public = self.access.PUBLIC_SPACE
        verb, _, rest = ctx.args.partition(" ")
        verb, rest = verb.lower(), rest.strip()
        if not verb:
            rows = await self.engine.list([public], kinds=("fact", "chunk"), limit=50)
            if not rows:
                return "No public memories yet."
            now = self.clock()
            return "Public memories (every user's recall reads these):\n" + "\n".join(
                f"[{r.id}] {trim(r.text, 200)} ({humanize_age(r.created_at, now)})" for r in rows)
        if verb == "add" and rest:
            rec = await self.engine.remember(rest, public, source="public")
            audit.info("public memory %s added by %s", rec.id, ctx.allowed.identity.key)
            return f"Shared [{rec.id}] with everyone."
        memory_id, _, text = rest.partition(" ")
        if verb == "edit" and memory_id and text.strip():
            rec = await self.engine.edit(memory_id, text, [public])
            if rec is None:
                return f"[{memory_id}] is not a public memory (see /public)."
            audit.info("public memory %s edited into %s by %s", memory_id, rec.id, ctx.allowed.identity.key)
            return f"Edited: [{memory_id}] is now [{rec.id}] {trim(rec.text, 200)}"
        if verb == "forget" and memory_id:
            res = await self.engine.forget([memory_id], [public])
            if not res.forgotten:
                return f"[{memory_id}] is not a public memory (see /public)."
            audit.info("public memory %s forgotten by %s", memory_id, ctx.allowed.identity.key)
            return f"Forgot public memory [{memory_id}]."
        return "Usage: /public, /public add TEXT, /public edit ID TEXT, /public forget ID"

    async def _users(self, ctx: CommandContext) -> str:
        users = await self.access.users()
        return "\n".join(f"{u.key} {u.display_name} — {u.role.value}" for u in users) or "No users yet."

    async def _role(self, ctx: CommandContext) -> str:
        parts = ctx.args.split()
        if len(parts) != 2 or parts[1].lower() not in {r.value for r in Role}:
            return "Usage: /role USER owner|admin|user|blocked"
        ident = await self.access.set_role(parts[0], Role(parts[1].lower()), ctx.allowed.identity)
        return f"{ident.key} is now {ident.role.value}."

    async def _block(self, ctx: CommandContext) -> str:
        if not ctx.args:
            return "Usage: /block USER"
        ident = await self.access.set_role(ctx.args.split()[0], Role.BLOCKED, ctx.allowed.identity)
        return f"Blocked {ident.key}."

    async def _stats(self, ctx: CommandContext) -> str:
        store = self.engine.store
        usage = self.extra.get("usage")
        if usage is not None:
            await usage.aflush()  # LLM calls are recorded in batches
        today = self.clock().replace(hour=0, minute=0, second=0, microsecond=0)
        if today.tzinfo is not None:
            today = today.replace(tzinfo=None)

        def read(con):
            mem = con.execute("SELECT kind, count(*) FROM memories WHERE status = 'active' GROUP BY kind ORDER BY kind").fetchall()
            spaces = con.execute("SELECT count(*) FROM spaces").fetchone()[0]
            usage = con.execute("""SELECT count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0)
                                   FROM llm_usage WHERE called_at >= ?""", [today]).fetchone()
            return mem, spaces, usage

        mem, spaces, usage = await store.aread(read)
        queue = await asyncio.to_thread(pending_count, store)
        mem_text = ", ".join(f"{n} {k}s" for k, n in mem) or "none"
        return (f"Memories: {mem_text}\nSpaces: {spaces}\nIngest queue: {queue} waiting\n"
                f"LLM today: {usage[0]} calls, {usage[1]} prompt + {usage[2]} completion tokens")

    async def _jobs(self, ctx: CommandContext) -> str:
        scheduler = self.extra.get("scheduler")
        if scheduler is None:
            return "No scheduler is running."
        from bot.job_views import format_jobs

        return format_jobs(scheduler.status())

    async def _reindex(self, ctx: CommandContext) -> str:
        wm = await asyncio.to_thread(self.engine.rebuild_fts)
        return f"Keyword index rebuilt ({wm} rows covered)."

"""One person's memory as the MCP tools see it: a `MemoryDoor` answers a tool call with a
`CallToolResult`. `EngineDoor` opens on the engine for exactly one space, read-only or writable
(the gateway's /mcp builds one per request from the API key; `memgate mcp` without a gateway from
the key or the person it was started for). Every statement names that one space.

Results carry ids and dates; every stored text in them is neutralised (it cannot open or close our
blocks or forge a chat role) and the answer says the memories are data, as the prompt's memory
block does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from bot.access import erasure
from bot.access.erase_views import GROUPS_STAY, counts_text, plan_json
from bot.access.identities import AccessError
from memory.engine import MemoryEngine
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.prompts import MCP_DATA_NOTE
from memory.recall.search import MemoryHit
from memory.store.browse import bump_versions
from memory.store.pulse import pulse
from memory.store.rows import MemoryRecord, new_id
from memory.text import neutralize

if TYPE_CHECKING:
    from bot.reminders.desk import ReminderDesk

MAX_TEXT = 20_000          # one fact or message, as the HTTP API allows
MAX_MESSAGES = 100         # one captured turn
KINDS = ("fact", "chunk", "task")
ERASE_PHRASE = "erase everything"   # the one argument that lets erase_everything erase
READ_ONLY = "this key can only read: store and forget need a write key (memgate keys create --scope write)"


class MemoryDoor(Protocol):
    """What a tool call reaches: one person's memory (in this process or through a gateway)."""

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult: ...


def result(data: dict[str, Any]) -> CallToolResult:
    """The same answer twice, as MCP clients read it: JSON text for the model, structured for code."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
                          structured_content=data)


def _date(at: datetime) -> dict[str, str]:
    """The day and the exact time (UTC; the store keeps naive UTC times)."""
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return {"date": f"{at:%Y-%m-%d}", "created_at": at.isoformat()}


def hit_json(h: MemoryHit) -> dict[str, Any]:
    d = {"id": h.id, "kind": h.kind, "text": neutralize(h.text), "score": round(h.score, 4), **_date(h.created_at)}
    if h.category:
        d["category"] = h.category
    if h.pinned:
        d["pinned"] = True
    return d


def record_json(r: MemoryRecord) -> dict[str, Any]:
    d = {"id": r.id, "kind": r.kind, "text": neutralize(r.text), **_date(r.created_at)}
    for name, value in (("role", r.role), ("category", r.category)):
        if value:
            d[name] = value
    if r.pinned:
        d["pinned"] = True
    if r.tags:
        d["tags"] = [neutralize(t) for t in r.tags]
    return d


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{what} must be a non-empty string")
    if len(value) > MAX_TEXT:
        raise ToolError(f"{what} is longer than {MAX_TEXT} characters")
    return value


@dataclass(frozen=True, slots=True)
class EngineDoor:
    """One space of the engine, as one key (or one person) may use it."""

    engine: MemoryEngine
    space: str
    writable: bool
    reminders: ReminderDesk | None = None   # the gateway's (bot/reminders); None: no reminders here

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        handler = getattr(self, f"_{tool}", None)
        if handler is None or tool.startswith("_"):
            raise ToolError(f"unknown tool {tool}")
        return result(await handler(**args))

    def _may_write(self) -> None:
        if not self.writable:
            raise ToolError(READ_ONLY)

    async def _search(self, query: str, limit: int = 10) -> dict[str, Any]:
        query = _text(query, "query").strip()
        hits = await self.engine.search(query, [self.space], limit=max(1, min(limit, 50)), kinds=KINDS)
        out: dict[str, Any] = {"results": [hit_json(h) for h in hits], "note": MCP_DATA_NOTE}
        if not hits:
            out["hint"] = "nothing found; try shorter or other keywords"
        return out

    async def _store(self, text: str | None = None, messages: list[dict] | None = None, pinned: bool = False,
                     conversation_id: str | None = None) -> dict[str, Any]:
        self._may_write()
        if (text is None) == (messages is None):
            raise ToolError("give either text (one fact) or messages (a conversation turn)")
        await self.engine.ensure_space(self.space, "user")
        if text is not None:
            rec = await self.engine.remember(_text(text, "text"), self.space, pinned=pinned, source="mcp")
            return {"status": "stored", "id": rec.id, "pinned": rec.pinned, **_date(rec.created_at)}
        if not messages or len(messages) > MAX_MESSAGES:
            raise ToolError(f"messages must hold 1 to {MAX_MESSAGES} messages")
        turn = tuple(TurnMessage(role=m["role"], text=_text(m["content"], "content")) for m in messages)
        job_id = new_id("j")
        # A conversation id names a session of this space only: two keys cannot share one.
        session = f"mcp:{self.space}:{conversation_id}" if conversation_id else None
        queued = await self.engine.capture(CapturedTurn(space_id=self.space, session_id=session, turn_id=job_id,
                                                        created_at=self.engine.clock(), messages=turn))
        if not queued:
            raise ToolError("after cleaning, the turn holds no text to remember")
        return {"status": "accepted", "job_id": job_id,
                "note": "the turn is kept; its facts are extracted in the background (by the running "
                        "gateway, or when it next starts) and are then searchable"}

    async def _get(self, id: str) -> dict[str, Any]:
        rows = await self.engine.get([id], [self.space])
        if not rows or rows[0].status == "deleted":
            raise ToolError(f"no memory {id} here")
        return {**record_json(rows[0]), "status": rows[0].status, "note": MCP_DATA_NOTE}

    async def _recent(self, kind: str = "fact", limit: int = 20) -> dict[str, Any]:
        kinds = KINDS if kind == "all" else (kind,)
        if not set(kinds) <= set(KINDS):
            raise ToolError(f"kind must be one of {', '.join(KINDS)} or all")
        rows = await self.engine.list([self.space], kinds=kinds, limit=max(1, min(limit, 100)))
        return {"memories": [record_json(r) for r in rows], "note": MCP_DATA_NOTE}

    async def _forget(self, id: str) -> dict[str, Any]:
        self._may_write()
        done = await self.engine.forget([id], [self.space])
        if not done.forgotten:
            raise ToolError(f"no memory {id} here")
        await self.engine.store.awrite(lambda c: bump_versions(c, list(done.forgotten)))
        return {"status": "forgotten", "forgotten": list(done.forgotten)}

    async def _erase_everything(self, confirm: str = "") -> dict[str, Any]:
        """The whole space, for good, only with the exact phrase (bot.access.erasure)."""
        self._may_write()
        try:
            planned = await erasure.plan(self.engine, [self.space])
        except AccessError as exc:
            raise ToolError(str(exc)) from None
        if confirm.strip().lower() != ERASE_PHRASE:
            return {"status": "not erased", "would_erase": plan_json(planned),
                    "note": f"this would erase {counts_text(planned)} for good. {GROUPS_STAY} Only if the person asked "
                            f"to erase everything: call again with confirm=\"{ERASE_PHRASE}\"."}
        done = await erasure.erase(self.engine, planned, by="an MCP client")
        return {"status": "erased", "erased": plan_json(done)}

    async def _timeline(self, id: str, window: int = 3) -> dict[str, Any]:
        rows = await self.engine.timeline(id, [self.space], max(1, min(window, 10)))
        if not rows:
            raise ToolError(f"no memory {id} here")
        return {"messages": [record_json(r) for r in rows], "note": MCP_DATA_NOTE}

    async def _pulse(self, days: int = 7) -> dict[str, Any]:
        if days not in (7, 30):
            raise ToolError("days must be 7 or 30")
        today = self.engine.clock().replace(hour=0, minute=0, second=0, microsecond=0)
        since, until = today - timedelta(days=days - 1), today + timedelta(days=1)
        p = await self.engine.store.aread(lambda c: pulse(c, self.space, since, until, "day"))
        categories: dict[str, int] = {}
        for b in p.buckets:
            for name, n in b.by_category.items():
                categories[name] = categories.get(name, 0) + n
        return {"days": days, "total": p.total,
                "per_day": [{"date": f"{b.start:%Y-%m-%d}", "count": b.count, "by_kind": b.by_kind} for b in p.buckets],
                "top_categories": sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))[:6],
                "top_tags": [list(t) for t in p.top_tags[:6]]}

    def _desk(self) -> ReminderDesk:
        if self.reminders is None:
            raise ToolError("reminders are set and listed through the running gateway (memgate run)")
        return self.reminders

    async def _remind(self, when: str, what: str) -> dict[str, Any]:
        from bot.reminders.views import reminder_json

        self._may_write()
        got = await self._desk().set(self.space, None, "mcp", when=_text(when, "when"), what=_text(what, "what"))
        if got.reminder is None:
            return {"status": "not_set", "ask_the_user": got.answer}
        return {"status": "set", "reminder": {**reminder_json(got.reminder), "what": neutralize(got.reminder.text)},
                "confirmation": neutralize(got.answer)}

    async def _reminders(self, cancel: int | None = None) -> dict[str, Any]:
        from bot.reminders.views import reminder_json

        desk = self._desk()
        if cancel is not None:
            self._may_write()
            r, answer = await desk.cancel(cancel, [self.space])
            if r is None:
                raise ToolError(answer)
            return {"status": "cancelled", "reminder": {**reminder_json(r), "what": neutralize(r.text)}}
        rows = await desk.store.active([self.space])
        return {"zone": (await desk.zone(self.space)).key,
                "reminders": [{**reminder_json(r), "what": neutralize(r.text)} for r in rows], "note": MCP_DATA_NOTE}

"""The tools the LLM may call, each with a JSON schema, each limited to the spaces the speaker
may see. Results are compact JSON strings (they cost prompt tokens on the next round).

Tools registered `beyond=True` write where other people read (the public space): they are offered
and run only when the turn's context carries a `propose` (bot.approvals: the speaker's own DM,
nothing of others in the prompt), and they write nothing themselves, they propose.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.message import Message
from memory.engine import MemoryEngine
from memory.store.rows import MemoryRecord
from memory.recall.search import MemoryHit
from memory.text import trim

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is asking: the spaces they may read, the one they write to, and whether they may
    write to the public space (which every user's recall reads)."""

    space_ids: tuple[str, ...]
    write_space: str
    public_space: str = "public"
    may_write_public: bool = False
    kept_spaces: tuple[str, ...] = ()     # spaces the speaker had before a /link: still their own
    private_chat: bool = False            # the speaker's own direct message (not a group)
    speaker: str = ""                     # their identity key ("telegram:123")
    conversation: str = ""                # the chat's conversation key
    origin: Message | None = None         # the message being answered (where a reminder set now goes)
    # Set by the agent for a turn that may propose writes beyond the speaker's space (bot.approvals):
    # propose(what, run) files one for the speaker to confirm and returns its code.
    propose: Callable[[str, Callable[[], Awaitable[str]]], str] | None = None

    @property
    def own_spaces(self) -> tuple[str, ...]:
        return (self.write_space, *self.kept_spaces)


def function_schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


MEMORY_TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    function_schema("memory_search", "Search the long-term memory of this conversation's people (facts, past messages, task "
        "summaries). Use short keywords; try again with other words if nothing useful comes back.",
        {"query": {"type": "string"},
         "scope": {"type": "string", "enum": ["all", "mine", "public"], "description": "default all"},
         "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "default 10"}}, ["query"]),
    function_schema("memory_get", "Read one memory in full by its id (ids appear in brackets in the memory context).",
        {"id": {"type": "string"}}, ["id"]),
    function_schema("memory_timeline", "Show the messages around a memory in its original conversation.",
        {"id": {"type": "string"}, "window": {"type": "integer", "minimum": 1, "maximum": 10, "description": "default 3"}}, ["id"]),
    function_schema("memory_store", "Remember a fact about the user for the long term (only when the user asks you to remember "
        "something, or states an important lasting fact).",
        {"text": {"type": "string"}, "pinned": {"type": "boolean", "description": "pinned facts are never changed automatically"}},
        ["text"]),
    function_schema("memory_forget", "Forget a memory by id, when the user asks you to.", {"id": {"type": "string"}}, ["id"]),
    function_schema("memory_write_public", "Write a memory to the public space shared by everyone here (only when the user "
        "explicitly asks to share it).", {"text": {"type": "string"}}, ["text"]),
)

Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]

# Said to the model, which then tells the person; the memory itself stays unwritten.
PUBLIC_WRITE_REFUSED = ("only the bot's admins can write to the public space; offer to remember it "
                        "for this user instead (memory_store)")
NOT_HERE = ("writing to the public space is not possible from this chat (only in the admin's own direct "
            "message, with nothing of other people in view); the admin can use /public add there")
PROPOSED = ("not written yet: the user must confirm it with the /confirm command shown under your reply; "
            "tell them it waits for their confirmation")
# Tools whose results show nothing of any space (they only write the speaker's own): the rest may
# carry other people's words into the prompt.
_BLIND = frozenset({"memory_store", "memory_forget"})


def _hit(h: MemoryHit) -> dict[str, Any]:
    return {"id": h.id, "kind": h.kind, "text": trim(h.text, 500), "date": f"{h.created_at:%Y-%m-%d}",
            "score": h.score, **({"speaker": h.speaker} if h.speaker else {}), **({"pinned": True} if h.pinned else {})}


def _record(r: MemoryRecord) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "role": r.role, "text": r.text, "date": f"{r.created_at:%Y-%m-%d %H:%M}",
            "pinned": r.pinned, "status": r.status}


class ToolBox:
    """Schemas and handlers; `execute` never raises (errors come back as JSON for the model)."""

    def __init__(self, engine: MemoryEngine) -> None:
        self.engine = engine
        self._schemas: list[dict[str, Any]] = list(MEMORY_TOOL_SCHEMAS)
        self._handlers: dict[str, Handler] = {
            "memory_search": self._search, "memory_get": self._get, "memory_timeline": self._timeline,
            "memory_store": self._store, "memory_forget": self._forget, "memory_write_public": self._write_public,
        }
        self._beyond: set[str] = {"memory_write_public"}

    def register(self, schema: dict[str, Any], handler: Handler, *, beyond: bool = False) -> None:
        """Add a tool (tasks and skills register theirs here). `beyond`: it writes where other people
        read, so it is offered only with a `propose` in the context and must propose, not write."""
        self._schemas.append(schema)
        name = schema["function"]["name"]
        self._handlers[name] = handler
        if beyond:
            self._beyond.add(name)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return list(self._schemas)

    def schemas_for(self, ctx: ToolContext) -> list[dict[str, Any]]:
        """The tools offered in this context: those reaching beyond the speaker's space only with a `propose`."""
        return [s for s in self._schemas if ctx.propose is not None or s["function"]["name"] not in self._beyond]

    def shows_others(self, name: str) -> bool:
        """Whether a call of this tool may bring other people's words into the prompt (any reader may)."""
        return name not in _BLIND and name not in self._beyond

    async def execute(self, name: str, arguments: str | dict, ctx: ToolContext) -> str:
        handler = self._handlers.get(name)
        if handler is None:
            return json.dumps({"error": f"unknown tool {name}"})
        if name in self._beyond and ctx.propose is None:
            # Not offered here (a model may call a tool it was not given): refused before it runs.
            return json.dumps({"error": PUBLIC_WRITE_REFUSED if not ctx.may_write_public else NOT_HERE})
        try:
            args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
            result = await handler(args, ctx)
        except (ValueError, KeyError, TypeError) as exc:
            return json.dumps({"error": f"bad arguments for {name}: {exc}"})
        except Exception:
            log.exception("tool %s failed", name)
            return json.dumps({"error": f"{name} failed; answer without it"})
        return json.dumps(result, ensure_ascii=False, default=str)

    # --- handlers --------------------------------------------------------------------------
    def _scope(self, scope: str, ctx: ToolContext) -> tuple[str, ...]:
        if scope == "mine":
            return tuple(s for s in ctx.space_ids if s != ctx.public_space)
        if scope == "public":
            return tuple(s for s in ctx.space_ids if s == ctx.public_space)
        return ctx.space_ids

    async def _search(self, args: dict, ctx: ToolContext) -> Any:
        query = str(args["query"]).strip()
        if not query:
            raise ValueError("query is empty")
        s = self.engine.recall_settings
        limit = max(1, min(int(args.get("limit") or s.search_default), s.search_max))
        hits = await self.engine.search(query, self._scope(str(args.get("scope") or "all"), ctx), limit=limit)
        return {"results": [_hit(h) for h in hits]} if hits else {"results": [], "hint": "nothing found; try shorter or other keywords"}

    async def _get(self, args: dict, ctx: ToolContext) -> Any:
        rows = await self.engine.get([str(args["id"])], ctx.space_ids)
        return _record(rows[0]) if rows else {"error": "no such memory"}

    async def _timeline(self, args: dict, ctx: ToolContext) -> Any:
        window = max(1, min(int(args.get("window") or 3), 10))
        rows = await self.engine.timeline(str(args["id"]), ctx.space_ids, window)
        return {"messages": [_record(r) for r in rows]} if rows else {"error": "no such memory"}

    async def _store(self, args: dict, ctx: ToolContext) -> Any:
        text = str(args["text"]).strip()
        if not text:
            raise ValueError("text is empty")
        rec = await self.engine.remember(text, ctx.write_space, pinned=bool(args.get("pinned")), source="tool")
        return {"stored": rec.id, "pinned": rec.pinned}

    async def _forget(self, args: dict, ctx: ToolContext) -> Any:
        # Only the speaker's own space: nobody forgets the public space or someone else's memory.
        res = await self.engine.forget([str(args["id"])], list(ctx.own_spaces))
        return {"forgotten": list(res.forgotten)} if res.forgotten else {"error": "no such memory of yours"}

    async def _write_public(self, args: dict, ctx: ToolContext) -> Any:
        if not ctx.may_write_public:
            return {"error": PUBLIC_WRITE_REFUSED}
        text = str(args["text"]).strip()
        if not text:
            raise ValueError("text is empty")

        async def write() -> str:
            rec = await self.engine.remember(text, ctx.public_space, source="public")
            return f"Shared [{rec.id}] with everyone: {trim(text, 200)}"

        code = ctx.propose(f"write to the public space every user's recall reads: “{trim(text, 500)}”", write)
        return {"pending": code, "status": PROPOSED}

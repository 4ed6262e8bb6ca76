"""The tools the LLM may call, each with a JSON schema, each limited to the spaces the speaker
may see. Results are compact JSON strings (they cost prompt tokens on the next round)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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

    def register(self, schema: dict[str, Any], handler: Handler) -> None:
        """Add a tool (tasks and skills register theirs here)."""
        self._schemas.append(schema)
        self._handlers[schema["function"]["name"]] = handler

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return list(self._schemas)

    async def execute(self, name: str, arguments: str | dict, ctx: ToolContext) -> str:
        handler = self._handlers.get(name)
        if handler is None:
            return json.dumps({"error": f"unknown tool {name}"})
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
        rec = await self.engine.remember(text, ctx.public_space, source="public")
        return {"stored": rec.id, "space": "public"}

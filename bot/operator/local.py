"""The operator's work on the database itself: `LocalOperator` (no gateway running) and the
functions the running gateway's admin routes share with it (bot.api.routes_operator), so that
`memgate memory|pairing|keys|jobs|reembed` do exactly the same thing either way.

The heavy part of the command line (DuckDB, the embedding model): bot.cli.reach imports it only when no
gateway answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime

from bot.access import erasure
from bot.access.api_keys import ApiKey, Keys
from bot.access.erase_views import ErasePlan
from bot.access.identities import CONSOLE_CHANNEL, AccessError
from bot.access.pairing import Pairing
from bot.access.policy import Access, Allowed
from bot.errors import ConfigError
from bot.message import Message
from bot.job_views import QueueStatus
from bot.operator.protocol import ImportSummary, MemoryLine, OnBad, PendingLine, Person, Progress, user_space
from bot.scheduler import JobSpec, JobStatus, load_job_statuses
from memory.embed import Embedder
from memory.engine import MemoryEngine


def all_spaces(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT id FROM spaces ORDER BY id").fetchall()]


async def search_lines(engine: MemoryEngine, query: str, spaces: Sequence[str], limit: int) -> list[MemoryLine]:
    hits = await asyncio.to_thread(engine.recaller.search, query, list(spaces), limit=limit)
    return [MemoryLine(h.id, h.kind, h.space_id, h.created_at, h.pinned, h.text, h.score) for h in hits]


async def list_lines(engine: MemoryEngine, spaces: Sequence[str], kinds: Sequence[str], limit: int) -> list[MemoryLine]:
    rows = await engine.list(list(spaces), kinds=tuple(kinds), limit=limit)
    return [MemoryLine(r.id, r.kind, r.space_id, r.created_at, r.pinned, r.text) for r in rows]


async def people(access: Access) -> list[Person]:
    return [Person(i.key, i.space_id, i.role.value, i.display_name) for i in await access.users()]


async def person_space(access: Access, who: str, *, create: bool) -> str:
    """The space `memgate chat --user WHO` talks in (or an identity given as channel:id)."""
    channel, sep, external_id = who.partition(":")
    if sep and channel != CONSOLE_CHANNEL:
        ident = await access.identity(channel, external_id)
        if ident is None:
            raise ConfigError(f"--user {who}: no such identity here (memgate chat --user NAME uses console:NAME)")
        return ident.space_id
    name = external_id if sep else who
    ident = await access.identity(CONSOLE_CHANNEL, name)
    if ident is not None:
        return ident.space_id
    if not create:
        raise ConfigError(f"--user {who}: nobody of that name has talked here yet")
    allowed = await access.check(Message(channel=CONSOLE_CHANNEL, chat_id=name, sender_id=name, sender_name=name,
                                         text="", timestamp=datetime.now(UTC)))
    assert isinstance(allowed, Allowed)  # the console is always let in
    return allowed.write_space


async def chosen_spaces(engine: MemoryEngine, access: Access, space: str | None, user: str | None) -> list[str]:
    """--user NAME, --space ID, or every space."""
    if user:
        return [await person_space(access, user, create=False)]
    if space:
        return [space]
    return await engine.store.aread(all_spaces)


async def erase_plan(engine: MemoryEngine, access: Access, space: str | None, user: str | None) -> ErasePlan:
    """What `memory erase --user NAME | --space ID` would remove (ConfigError: no one named, or the public space)."""
    if not space and not user:
        raise ConfigError("say whose memory to erase: --user NAME (as /users shows them, or channel:id) or --space ID")
    try:
        spaces = [user_space(await people(access), user)] if user else [space]
        return await erasure.plan(engine, spaces)
    except AccessError as exc:
        raise ConfigError(str(exc)) from None


async def erase_person(engine: MemoryEngine, access: Access, space: str | None, user: str | None) -> ErasePlan:
    """Erase what `erase_plan` shows: every row, file and cache of the space; its people become strangers."""
    return await erasure.erase(engine, await erase_plan(engine, access, space, user), by="the operator")


def queue_status(engine: MemoryEngine, now: datetime) -> QueueStatus:
    """The turns waiting to become memory and when the oldest was captured (blocking)."""
    waiting, oldest = engine.store.read(lambda c: c.execute(
        "SELECT count(*), min(created_at) FROM ingest_queue WHERE status = 'pending'").fetchone())
    return QueueStatus(int(waiting), oldest, now)


def export_lines(engine: MemoryEngine, spaces: Sequence[str]) -> Iterator[str]:
    """`memory export`: one JSON line per live memory (the same bytes with or without a gateway)."""
    import json

    for row in engine.export_rows(spaces):
        yield json.dumps(row, ensure_ascii=False) + "\n"


async def import_target(engine: MemoryEngine, access: Access, lines: Sequence[bytes], space: str | None,
                        user: str | None, source: str) -> Callable[[object], str]:
    """Where each row of an export file goes, or ConfigError saying why the file cannot be imported
    as asked (it holds several people's memories, or spaces nobody here uses)."""
    from memory.portable import PUBLIC, BadLine, parse_lines, source_spaces

    rows = [r for _, r in parse_lines(lines) if not isinstance(r, BadLine)]
    sources = source_spaces(rows)
    known = set(await engine.store.aread(all_spaces))
    if user or space:
        if space and space not in known:
            raise ConfigError(f"--space {space}: no such space here (use --user NAME for a person)")
        if len(sources) > 1:
            raise ConfigError(f"{source} holds the memories of {len(sources)} spaces ({', '.join(sorted(sources))}); "
                              "import them one person at a time (memgate memory export --space ID)")
        target = space or await person_space(access, user, create=True)
        # Whatever space the rows name (public among them): an import for a person writes to that
        # person's space only. Sharing with everyone is `memgate public add`, never a side effect.
        return lambda r: target
    unknown = sorted(sources - known)
    if unknown:
        raise ConfigError(f"{source} belongs to space(s) {', '.join(unknown)} that nobody here uses: "
                          "say whose memories these are with --user NAME (or --space ID)")
    return lambda r: r.space_id or PUBLIC


def import_file(engine: MemoryEngine, lines: Iterable[bytes], space_for: Callable[[object], str], *,
                progress: Progress | None = None, on_bad: OnBad | None = None) -> ImportSummary:
    """The idempotent import (ids kept: a second run adds nothing). Blocking."""
    report = engine.import_lines(lines, space_for, progress=progress,
                                 on_bad=(lambda b: on_bad(b.line, b.reason)) if on_bad else None)
    return ImportSummary(report.added, report.present, tuple((b.line, b.reason) for b in report.bad))


def reembed_all(engine: MemoryEngine, embedder: Embedder, progress: Progress | None = None) -> tuple[int, str]:
    """Every memory re-embedded with `embedder` (crash-safe, resumes), then the keyword index. Blocking."""
    n = engine.reembed(embedder, progress=progress)
    engine.rebuild_fts()
    return n, engine.embedder.name


class LocalOperator:
    """No gateway running: act on the database file directly."""

    def __init__(self, engine: MemoryEngine, access: Access, pairing: Pairing, keys: Keys,
                 clock: Callable[[], datetime], embedder: Callable[[], Embedder] | None = None,
                 job_specs: Sequence[JobSpec] = ()) -> None:
        self.engine, self.access, self.pairing, self.keys_store, self.clock = engine, access, pairing, keys, clock
        self.store = engine.store
        self.make_embedder = embedder  # the configured model, for reembed (built only then)
        self.job_specs = tuple(job_specs)  # the gateway's jobs, so their due times show offline too

    def now(self) -> datetime:
        return self.clock()

    def pending(self) -> list[PendingLine]:
        return [PendingLine(p.code, p.key, p.display_name) for p in asyncio.run(self.pairing.pending())]

    def approve(self, code: str) -> Person:
        i = asyncio.run(self.pairing.approve(code.upper(), None)).identity
        return Person(i.key, i.space_id, i.role.value, i.display_name)

    def deny(self, code: str) -> None:
        asyncio.run(self.pairing.deny(code.upper(), None))

    def jobs(self) -> list[JobStatus]:
        return load_job_statuses(self.store, self.job_specs)

    def queue(self) -> QueueStatus:
        return queue_status(self.engine, self.clock())

    def keys(self) -> list[ApiKey]:
        return self.keys_store.list()

    def create_key(self, scope, space, user, expires, name):
        if user:
            space = user_space(asyncio.run(people(self.access)), user)
        if space:
            asyncio.run(self.engine.ensure_space(space, "user"))
        return self.keys_store.create(scope, None if scope == "admin" else space, expires=expires, name=name)

    def revoke_key(self, prefix: str) -> ApiKey:
        return self.keys_store.revoke(prefix)

    def _spaces(self, space: str | None, user: str | None) -> list[str]:
        return asyncio.run(chosen_spaces(self.engine, self.access, space, user))

    def search(self, query: str, space: str | None, limit: int, user: str | None = None) -> list[MemoryLine]:
        return asyncio.run(search_lines(self.engine, query, self._spaces(space, user), limit))

    def list(self, space: str | None, kinds: Sequence[str], limit: int, user: str | None = None) -> list[MemoryLine]:
        return asyncio.run(list_lines(self.engine, self._spaces(space, user), kinds, limit))

    def export(self, space: str | None, user: str | None) -> Iterator[str]:
        return export_lines(self.engine, self._spaces(space, user))

    def import_lines(self, lines: list[bytes], space: str | None, user: str | None, *, source: str,
                     progress: Progress | None = None, on_bad: OnBad | None = None) -> ImportSummary:
        space_for = asyncio.run(import_target(self.engine, self.access, lines, space, user, source))
        return import_file(self.engine, lines, space_for, progress=progress, on_bad=on_bad)

    def reembed(self, progress: Progress | None = None) -> tuple[int, str]:
        if self.make_embedder is None:
            raise ConfigError("no embedding model to re-embed with")
        return reembed_all(self.engine, self.make_embedder(), progress)

    def public_add(self, text: str) -> str:
        return asyncio.run(self.engine.remember(text, self.access.PUBLIC_SPACE, source="public")).id

    def public_edit(self, memory_id: str, text: str) -> str | None:
        rec = asyncio.run(self.engine.edit(memory_id, text, [self.access.PUBLIC_SPACE]))
        return rec.id if rec is not None else None

    def public_forget(self, memory_id: str) -> bool:
        return bool(asyncio.run(self.engine.forget([memory_id], [self.access.PUBLIC_SPACE])).forgotten)

    def erase_plan(self, space: str | None, user: str | None) -> ErasePlan:
        return asyncio.run(erase_plan(self.engine, self.access, space, user))

    def erase(self, space: str | None, user: str | None) -> ErasePlan:
        return asyncio.run(erase_person(self.engine, self.access, space, user))

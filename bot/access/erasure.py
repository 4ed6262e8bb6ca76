"""Erasing a person: their private space (and the spaces their identities kept from before a
/link), every identity that signs in to it (they become strangers: pairing again if the policy
asks for it), and, through memory.engine.erase, every row, file and cache of those spaces.

One path for every door: /forget everything in a direct chat, `memgate memory erase` (with or
without a gateway), `DELETE /api/v1/me`, the admin route, the dashboard and MCP. Each door first
shows the plan (`plan`), then erases what it showed (`erase`). The public space is never erased
this way (it is everyone's: its memories are forgotten one by one); a group's space is erased only
by the operator naming it, never by one member.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.access.codes import new_code, normalize_code
from bot.access.erase_views import ErasePlan
from bot.access.identities import PUBLIC_SPACE, AccessError
from memory.engine import MemoryEngine

log = logging.getLogger(__name__)

# How long a shown erase waits for its code (/forget everything, DELETE /api/v1/me, the dashboard).
ERASE_CONFIRM = timedelta(minutes=5)
audit = logging.getLogger("memgate.audit")


async def _people_and_kept(engine: MemoryEngine, space_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """The identities signing in to the spaces, and the spaces those identities kept."""
    spaces = list(space_ids)
    rows = await engine.store.aread(lambda c: c.execute(
        """SELECT i.channel || ':' || i.external_id, k.space_id FROM identities i
           LEFT JOIN kept_spaces k ON k.channel = i.channel AND k.external_id = i.external_id
           WHERE i.space_id IN (SELECT unnest(?)) ORDER BY 1, 2""", [spaces]).fetchall())
    people = list(dict.fromkeys(r[0] for r in rows))
    kept = [r[1] for r in rows if r[1] is not None and r[1] not in spaces]
    return people, list(dict.fromkeys(kept))


async def plan(engine: MemoryEngine, space_ids: Sequence[str]) -> ErasePlan:
    """What erasing these spaces removes; AccessError for the public space or an unknown one."""
    spaces = list(dict.fromkeys(space_ids))
    if PUBLIC_SPACE in spaces:
        raise AccessError("the public space is everyone's, not one person's: forget its memories one by one "
                          "(/public forget ID, memgate public forget ID)")
    known = set(await engine.store.aread(lambda c: [r[0] for r in c.execute(
        "SELECT id FROM spaces WHERE id IN (SELECT unnest(?))", [spaces]).fetchall()]))
    people, kept = await _people_and_kept(engine, spaces)
    missing = [s for s in spaces if s not in known and not people]
    if missing:
        raise AccessError(f"no space {missing[0]} here (memgate memory erase --user NAME names a person)")
    spaces += kept
    c = await engine.erase_counts(spaces)
    return ErasePlan(tuple(spaces), tuple(people), c.facts, c.messages, c.tasks, c.skills, c.reminders)


async def erase(engine: MemoryEngine, planned: ErasePlan, *, by: str) -> ErasePlan:
    """Erase what `planned` showed (its spaces, recomputed: whoever signed in meanwhile goes too)
    and return what was removed. `by` names who asked, for the audit log (never any text). The
    identity cache is dropped by the engine's erase hook (bot.app wires it)."""
    fresh = await plan(engine, planned.spaces)
    done = await engine.erase(fresh.spaces)
    audit.info("erased %d space(s) and %d identit%s, asked by %s", len(fresh.spaces), len(fresh.people),
               "y" if len(fresh.people) == 1 else "ies", by)
    return ErasePlan(fresh.spaces, fresh.people, done.facts, done.messages, done.tasks, done.skills, done.reminders,
                     done=True)


@dataclass(frozen=True, slots=True)
class _Waiting:
    code: str
    who: str
    spaces: tuple[str, ...]
    expires_at: datetime


class EraseCodes:
    """Erases shown and waiting for their code: one per place (a chat, an API key), for the person
    who asked there, good once and for `ttl`. In this process only: a restart drops them (the safe
    direction)."""

    MAX = 1000   # a bound on memory whatever a client asks; the oldest go first

    def __init__(self, *, clock: Callable[[], datetime], ttl: timedelta) -> None:
        self.clock, self.ttl = clock, ttl
        self._waiting: dict[str, _Waiting] = {}

    @property
    def minutes(self) -> int:
        return max(1, int(self.ttl.total_seconds() // 60))

    def issue(self, place: str, who: str, planned: ErasePlan) -> str:
        """A new code for erasing `planned` from `place` (replacing one waiting there)."""
        self._sweep()
        while len(self._waiting) >= self.MAX:
            self._waiting.pop(next(iter(self._waiting)))
        code = new_code()
        self._waiting[place] = _Waiting(code, who, planned.spaces, self.clock() + self.ttl)
        return code

    def take(self, place: str, who: str, code: str) -> ErasePlan | None:
        """The erase waiting at `place` for `who` under `code` (once), or None."""
        self._sweep()
        w = self._waiting.get(place)
        if w is None or w.who != who or not secrets.compare_digest(w.code, normalize_code(code)):
            return None
        del self._waiting[place]
        return ErasePlan(w.spaces, ())

    def _sweep(self) -> None:
        now = self.clock()
        self._waiting = {k: w for k, w in self._waiting.items() if w.expires_at > now}

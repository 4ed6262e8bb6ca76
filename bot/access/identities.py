"""The people the bot knows: one identity per (channel, external id), with a role and a private
user space, stored in the `identities` table (bot.access.schema) and cached in memory.

The tables are the truth; the cache is dropped on every write made through `Identities.write`
(all access writes go through it: the store has one writer), and a read that raced a write never
enters it. Configured owners are owners whatever the table says. Who may change whose role is
decided here too: admins manage users, only the owner makes or changes admins, nobody changes the
owner's role.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from bot.access.codes import unique_code
from bot.errors import MemgateError
from bot.message import Message
from bot.settings import AccessConfig
from memory.store.connection import Conn, Store
from memory.store.rows import ensure_space, new_id, utc_naive

log = logging.getLogger(__name__)

PUBLIC_SPACE = "public"
CONSOLE_CHANNEL = "console"
# Bound on remembered "unknown person" lookups (strangers can be many; known people are few).
_NEGATIVE_CACHE_MAX = 4096


class AccessError(MemgateError):
    """An access operation was refused (unknown or expired code, missing permission, ...)."""


class Role(StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    USER = "user"
    BLOCKED = "blocked"


@dataclass(frozen=True, slots=True)
class Identity:
    """One person on one channel, with their role and (private) user space.

    `kept_spaces`: spaces this identity had before it joined another by /link (oldest first);
    still readable by it, by no one else."""

    channel: str
    external_id: str
    space_id: str
    role: Role
    display_name: str
    kept_spaces: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.external_id}"


def parse_role(text: str) -> Role:
    """A role name as typed in `/role USER ROLE` -> Role; AccessError naming the valid ones."""
    try:
        return Role(text.strip().lower())
    except ValueError:
        raise AccessError(f"unknown role '{text}': use one of {', '.join(r.value for r in Role)}") from None


def _row_identity(row: tuple) -> Identity:
    return Identity(row[0], row[1], row[2], Role(row[3]), row[4], tuple(row[5] or ()))


_ID_COLUMNS = "channel, external_id, space_id, role, display_name"
# An identity row with its kept spaces, in one read (the hot path reads it once, then caches it).
_ID_SELECT = """SELECT i.channel, i.external_id, i.space_id, i.role, i.display_name,
       (SELECT array_agg(k.space_id ORDER BY k.kept_at, k.space_id) FROM kept_spaces k
        WHERE k.channel = i.channel AND k.external_id = i.external_id AND k.space_id <> i.space_id)
FROM identities i"""


class Identities:
    """The stored identities, cached: lookups, creation, renames, roles."""

    PUBLIC_SPACE = PUBLIC_SPACE

    def __init__(self, store: Store, config: AccessConfig, *, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.owners = frozenset(config.owners)
        self._cache: dict[str, Identity | None] = {}
        self._generation = 0            # bumped on every write: stale reads never enter the cache

    async def identity(self, channel: str, external_id: str) -> Identity | None:
        """The stored identity (cached), or None for someone never let in."""
        key = f"{channel}:{external_id}"
        if key in self._cache:
            return self._cache[key]
        generation = self._generation
        row = await self.store.aread(lambda con: con.execute(
            f"{_ID_SELECT} WHERE i.channel = ? AND i.external_id = ?", [channel, external_id]).fetchone())
        ident = self.effective(_row_identity(row)) if row else None
        if generation == self._generation:
            self.remember(ident, key)
        return ident

    async def users(self) -> list[Identity]:
        """Every stored identity, oldest first."""
        rows = await self.store.aread(lambda con: con.execute(
            f"{_ID_SELECT} ORDER BY i.created_at, i.channel, i.external_id").fetchall())
        return [self.effective(_row_identity(r)) for r in rows]

    def is_admin(self, identity: Identity) -> bool:
        """Owner or admin, by the latest role known here."""
        return self.role_now(identity) in (Role.OWNER, Role.ADMIN)

    async def set_role(self, who: str, role: Role, by: Identity) -> Identity:
        """Change a person's role. Admins manage users; only the owner makes or changes admins;
        nobody changes the owner's role."""
        role = Role(role)
        if not self.is_admin(by):
            raise AccessError("only the owner or an admin can change roles")
        target = await self.resolve(who)
        by_owner = self.role_now(by) is Role.OWNER
        if target.role is Role.OWNER:
            raise AccessError(f"{target.display_name} ({target.key}) is the owner; the owner's role cannot be changed")
        if role in (Role.OWNER, Role.ADMIN) and not by_owner:
            raise AccessError(f"only the owner can make someone {role.value}")
        if target.role is Role.ADMIN and not by_owner:
            raise AccessError(f"only the owner can change the role of an admin ({target.display_name})")
        now = self.now()

        def write(con: Conn) -> None:
            con.execute("UPDATE identities SET role = ?, updated_at = ? WHERE channel = ? AND external_id = ?",
                        [role.value, now, target.channel, target.external_id])

        await self.write(write)
        log.info("role of %s set to %s by %s", target.key, role.value, by.key)
        changed = replace(target, role=role)
        self.remember(changed)
        return changed

    # --- internals -------------------------------------------------------------------------
    def now(self) -> datetime:
        return utc_naive(self.clock())

    def effective(self, ident: Identity) -> Identity:
        """Configured owners are owners whatever the table says (config is the authority)."""
        if ident.key in self.owners and ident.role is not Role.OWNER:
            return replace(ident, role=Role.OWNER)
        return ident

    def role_now(self, identity: Identity) -> Role:
        """The stored role, not the one in a possibly stale Identity (an admin demoted meanwhile)."""
        if identity.key in self.owners:
            return Role.OWNER
        if identity.key not in self._cache:
            # Rare (admin commands right after a write): one primary-key read, off no hot path.
            row = self.store.read(lambda con: con.execute(
                f"{_ID_SELECT} WHERE i.channel = ? AND i.external_id = ?",
                [identity.channel, identity.external_id]).fetchone())
            self.remember(self.effective(_row_identity(row)) if row else None, identity.key)
        cached = self._cache.get(identity.key)
        return cached.role if cached is not None else identity.role

    def remember(self, ident: Identity | None, key: str | None = None) -> None:
        """Cache a lookup result; callers hold no await between reading and calling this."""
        if ident is None and len(self._cache) >= _NEGATIVE_CACHE_MAX:
            self._cache = {k: v for k, v in self._cache.items() if v is not None}
        self._cache[key or ident.key] = ident

    def drop_cached(self, *_: object) -> None:
        """Forget every cached lookup (identities were removed behind this object: an erase)."""
        self._generation += 1
        self._cache.clear()

    async def write(self, fn: Callable[[Conn], object]):
        """Run `fn` in one store transaction and drop the identity cache (it may have changed)."""
        try:
            return await self.store.awrite(fn)
        finally:
            self._generation += 1
            self._cache.clear()

    async def _create(self, msg: Message) -> Identity:
        """Store a person let in without pairing (console, configured owner, allowlist, open)."""
        key, now = f"{msg.channel}:{msg.sender_id}", self.now()
        if key in self.owners:
            role = Role.OWNER
        elif msg.channel == CONSOLE_CHANNEL and not self.owners:
            role = Role.OWNER
        else:
            role = Role.USER
        ident = await self.write(lambda con: self.select(con, msg.channel, msg.sender_id) or self.insert_identity(
            con, msg.channel, msg.sender_id, msg.sender_name or msg.sender_id, role, now))
        log.info("new identity %s (%s)", ident.key, ident.role.value)
        ident = self.effective(ident)
        self.remember(ident)
        return ident

    async def _rename(self, ident: Identity, name: str) -> Identity:
        now = self.now()
        await self.write(lambda con: con.execute(
            "UPDATE identities SET display_name = ?, updated_at = ? WHERE channel = ? AND external_id = ?",
            [name, now, ident.channel, ident.external_id]))
        renamed = replace(ident, display_name=name)
        self.remember(renamed)
        return renamed

    async def resolve(self, who: str) -> Identity:
        """'channel:id' or a display name (case-insensitive, leading @ ignored) -> one identity."""
        who = who.strip()
        channel, sep, external_id = who.partition(":")
        if sep:
            found = await self.identity(channel, external_id)
            if found is not None:
                return found
        name = who.removeprefix("@").casefold()
        matches = [i for i in await self.users() if i.display_name.removeprefix("@").casefold() == name]
        if not matches:
            raise AccessError(f"no user '{who}': use /users to see names and channel:id keys")
        if len(matches) > 1:
            raise AccessError(f"several users are called '{who}': use one of {', '.join(i.key for i in matches)}")
        return matches[0]

    @staticmethod
    def select(con: Conn, channel: str, external_id: str) -> Identity | None:
        row = con.execute(f"{_ID_SELECT} WHERE i.channel = ? AND i.external_id = ?", [channel, external_id]).fetchone()
        return _row_identity(row) if row else None

    @staticmethod
    def insert_identity(con: Conn, channel: str, external_id: str, name: str, role: Role, now: datetime) -> Identity:
        space = new_id("u")
        ensure_space(con, space, "user", name, now)
        ensure_space(con, PUBLIC_SPACE, "public", "public", now)
        con.execute(f"INSERT INTO identities ({_ID_COLUMNS}, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [channel, external_id, space, role.value, name, now, now])
        return Identity(channel, external_id, space, role, name)

    # Pairing and linking draw their codes through the access object they are given.
    unique_code = staticmethod(unique_code)

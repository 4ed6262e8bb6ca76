"""Who may talk to the bot, and which memory spaces they reach.

Identities (channel, external id) with a role and a private user space, allowlists and the
group policy, persisted in DuckDB (migrations 200-299; DM pairing is in bot/pairing.py, identity
linking in bot/linking.py). The tables are the truth; identities are cached in memory and the
cache is dropped on every write made through `Access.write` (all access writes go through it:
the store has one writer).

Spaces: a DM reads the person's user space (+ the spaces it kept when it joined another person's
by /link) + "public" and writes to the user space; a group reads the group space + "public" and
writes to the group space. A person's private space is never offered in a group, so no one can
read another person's memories through the bot. Who may write to "public" is decided here too
(`Allowed.may_write_public`: admins, or everyone under `public_writers = "everyone"`).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from bot.config import AccessConfig
from bot.errors import MemgateError
from bot.message import Message
from memory.store.rows import ensure_space, new_id, utc_naive
from memory.store.connection import Conn, Migration, Store

log = logging.getLogger(__name__)

PUBLIC_SPACE = "public"
CONSOLE_CHANNEL = "console"
# No 0/O/1/I: codes are read aloud and retyped by people.
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
# Bound on remembered "unknown person" lookups (strangers can be many; known people are few).
_NEGATIVE_CACHE_MAX = 4096

ACCESS_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        200,
        "access",
        """
        CREATE TABLE identities (
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            space_id VARCHAR NOT NULL,          -- the person's user space (shared once linked)
            role VARCHAR NOT NULL,              -- owner | admin | user | blocked
            display_name VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL,
            PRIMARY KEY (channel, external_id)
        );
        CREATE TABLE pairing_requests (
            code VARCHAR PRIMARY KEY,
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            display_name VARCHAR NOT NULL,
            chat_id VARCHAR NOT NULL,           -- where to tell them they were let in
            status VARCHAR NOT NULL DEFAULT 'pending',  -- pending | approved | denied
            created_at TIMESTAMP NOT NULL,
            expires_at TIMESTAMP NOT NULL,
            decided_by VARCHAR,
            decided_at TIMESTAMP
        );
        CREATE TABLE link_codes (
            code VARCHAR PRIMARY KEY,
            channel VARCHAR NOT NULL,           -- the issuer, whose space the redeemer joins
            external_id VARCHAR NOT NULL,
            status VARCHAR NOT NULL DEFAULT 'open',     -- open | used | replaced
            created_at TIMESTAMP NOT NULL,
            expires_at TIMESTAMP NOT NULL,
            used_by VARCHAR,
            used_at TIMESTAMP
        );
        """,
    ),
    Migration(
        201,
        "kept spaces",
        """
        -- A space an identity had before it joined another person's space by /link: its memories
        -- stay there (they never move into the joined space) and only that identity reads them.
        CREATE TABLE kept_spaces (
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            space_id VARCHAR NOT NULL,
            kept_at TIMESTAMP NOT NULL,
            PRIMARY KEY (channel, external_id, space_id)
        );
        """,
    ),
)

ALLOWLIST_TEXT = "Sorry, this bot is private."
DM_DISABLED_TEXT = "Sorry, direct messages are turned off for this bot."
GROUP_NOT_ALLOWED_TEXT = "Sorry, I'm not enabled in this group."


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


@dataclass(frozen=True, slots=True)
class Allowed:
    """The message may go on: who sent it, the spaces recall may read and the one it writes to.

    `may_write_public`: whether this speaker may add to the public space (admins, or everyone
    under `public_writers = "everyone"`): what lands there reaches every user's prompt.
    """

    identity: Identity
    space_ids: tuple[str, ...]
    write_space: str
    may_write_public: bool = False
    kept_spaces: tuple[str, ...] = ()

    @property
    def own_spaces(self) -> tuple[str, ...]:
        """The spaces that are this speaker's own: listed, exported and forgotten by them."""
        return (self.write_space, *self.kept_spaces)


@dataclass(frozen=True, slots=True)
class Refused:
    """The message stops here; `reply` is what to answer (None = stay silent)."""

    reply: str | None


class Doorbell(Protocol):
    """What a stranger's DM meets under the pairing policy (bot.pairing.Pairing)."""

    async def ring(self, msg: Message) -> Refused:
        """Their pairing code, or why they cannot have one."""


def new_code(choice: Callable[[str], str] = secrets.choice) -> str:
    """An 8-character code from CODE_ALPHABET (no 0/O/1/I); `choice` is injectable for tests."""
    return "".join(choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What a person typed -> the stored form: upper case, spaces and dashes dropped."""
    return re.sub(r"[\s\-]", "", text).upper()


def parse_role(text: str) -> Role:
    """A role name as typed in `/role USER ROLE` -> Role; AccessError naming the valid ones."""
    try:
        return Role(text.strip().lower())
    except ValueError:
        raise AccessError(f"unknown role '{text}': use one of {', '.join(r.value for r in Role)}") from None


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]", "_", part)


def group_space_id(channel: str, chat_id: str) -> str:
    """The space of one group chat: `g_<channel>_<chat_id>`, e.g. `g_telegram_-100123`.

    Characters outside [A-Za-z0-9-] become "_"; when that changes anything (or the channel
    name itself holds "_"), a hash of the exact "channel:chat_id" is appended so two groups can
    never end up in one space.
    """
    chan, chat = re.sub(r"[^a-z0-9]", "_", channel), _safe(chat_id)
    base = f"g_{chan}_{chat}"
    if chan != channel or "_" in channel or chat != chat_id or not chat_id:
        base += "_" + hashlib.sha256(f"{channel}:{chat_id}".encode()).hexdigest()[:12]
    return base


def _row_identity(row: tuple) -> Identity:
    return Identity(row[0], row[1], row[2], Role(row[3]), row[4], tuple(row[5] or ()))


_ID_COLUMNS = "channel, external_id, space_id, role, display_name"
# An identity row with its kept spaces, in one read (the hot path reads it once, then caches it).
_ID_SELECT = """SELECT i.channel, i.external_id, i.space_id, i.role, i.display_name,
       (SELECT array_agg(k.space_id ORDER BY k.kept_at, k.space_id) FROM kept_spaces k
        WHERE k.channel = i.channel AND k.external_id = i.external_id AND k.space_id <> i.space_id)
FROM identities i"""


class Access:
    """Decides, per inbound message, whether it goes on and in which spaces."""

    PUBLIC_SPACE = PUBLIC_SPACE

    def __init__(self, store: Store, config: AccessConfig, *, clock: Callable[[], datetime],
                 doorbell: Doorbell | None = None) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.owners = frozenset(config.owners)
        self._allow = frozenset(config.allow)
        self._groups = frozenset(config.groups)
        self._cache: dict[str, Identity | None] = {}
        self._generation = 0            # bumped on every write: stale reads never enter the cache
        self._group_spaces: set[str] = set()
        self._warned_groups: set[str] = set()
        # Set by the composition root once Pairing (which needs this object) exists.
        self.doorbell = doorbell

    # --- the per-message decision ----------------------------------------------------------
    async def check(self, msg: Message) -> Allowed | Refused:
        """Let the message in (with its spaces) or refuse it (with a reply or silently)."""
        if msg.is_group:
            return await self._check_group(msg)
        return await self._check_dm(msg)

    async def _check_dm(self, msg: Message) -> Allowed | Refused:
        key = f"{msg.channel}:{msg.sender_id}"
        console = msg.channel == CONSOLE_CHANNEL
        ident = await self.identity(msg.channel, msg.sender_id)
        if ident is not None and ident.role is Role.BLOCKED and not console:
            return Refused(None)
        if ident is None:
            if console or key in self.owners or (self.config.dm_policy != "disabled" and (
                    self.config.dm_policy == "open" or key in self._allow)):
                ident = await self._create(msg)
            else:
                return await self._refuse_stranger(msg)
        elif not console:
            refusal = self._known_refusal(ident)
            if refusal is not None:
                return refusal
        if msg.sender_name and msg.sender_name != ident.display_name:
            ident = await self._rename(ident, msg.sender_name)
        return Allowed(ident, (ident.space_id, *ident.kept_spaces, PUBLIC_SPACE), ident.space_id,
                       self.may_write_public(ident), ident.kept_spaces)

    def _known_refusal(self, ident: Identity) -> Refused | None:
        """A known, unblocked person under the current DM policy: None when they may talk."""
        if ident.role is Role.OWNER:
            return None
        policy = self.config.dm_policy
        if policy == "disabled":
            return Refused(DM_DISABLED_TEXT)
        if policy == "allowlist" and ident.role is not Role.ADMIN and ident.key not in self._allow:
            return Refused(ALLOWLIST_TEXT)
        return None

    async def _refuse_stranger(self, msg: Message) -> Refused:
        policy = self.config.dm_policy
        if policy == "disabled":
            return Refused(DM_DISABLED_TEXT)
        if policy == "allowlist":
            return Refused(ALLOWLIST_TEXT)
        if self.doorbell is None:
            log.warning("dm_policy is pairing but no pairing desk is wired; refusing %s:%s", msg.channel, msg.sender_id)
            return Refused(ALLOWLIST_TEXT)
        return await self.doorbell.ring(msg)

    async def _check_group(self, msg: Message) -> Allowed | Refused:
        policy = self.config.group_policy
        if policy == "disabled":
            return Refused(None)
        if self.config.require_mention and not msg.addressed_to_bot:
            return Refused(None)
        group_key = f"{msg.channel}:{msg.chat_id}"
        if policy == "allowlist" and group_key not in self._groups:
            if group_key not in self._warned_groups:
                self._warned_groups.add(group_key)
                log.info("group %s is not in access.groups; ignoring it", group_key)
            return Refused(GROUP_NOT_ALLOWED_TEXT if msg.addressed_to_bot else None)
        ident = await self.identity(msg.channel, msg.sender_id)
        if ident is not None and ident.role is Role.BLOCKED:
            return Refused(None)
        space = group_space_id(msg.channel, msg.chat_id)
        if space not in self._group_spaces:
            now = self.now()

            def write(con: Conn) -> None:
                ensure_space(con, space, "group", group_key, now)
                ensure_space(con, PUBLIC_SPACE, "public", "public", now)

            await self.store.awrite(write)
            self._group_spaces.add(space)
        if ident is None:
            # An unknown member speaks in the group space only; they are not stored, so a group
            # never becomes a way around DM pairing.
            ident = Identity(msg.channel, msg.sender_id, space, Role.USER, msg.sender_name or msg.sender_id)
        return Allowed(ident, (space, PUBLIC_SPACE), space, self.may_write_public(ident))

    # --- identities ------------------------------------------------------------------------
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

    def may_write_public(self, identity: Identity) -> bool:
        """Whether `identity` may write to the public space (config `access.public_writers`)."""
        if identity.role is Role.BLOCKED:
            return False
        return self.config.public_writers == "everyone" or self.is_admin(identity)

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

    @staticmethod
    def unique_code(con: Conn, table: str) -> str:
        while True:
            code = new_code()
            if con.execute(f"SELECT 1 FROM {table} WHERE code = ?", [code]).fetchone() is None:
                return code

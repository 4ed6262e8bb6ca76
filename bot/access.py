"""Who may talk to the bot, and which memory spaces they reach.

Identities (channel, external id) with a role and a private user space, DM pairing codes,
allowlists, the group policy and identity linking, persisted in DuckDB (migrations 200-299).
The tables are the truth; identities are cached in memory and the cache is dropped on every
write made here (all access writes go through this object: the store has one writer).

Spaces: a DM reads the person's user space + "public" and writes to the user space; a group
reads the group space + "public" and writes to the group space. A person's private space is
never offered in a group, so no one can read another person's memories through the bot.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

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
LINK_TTL = timedelta(minutes=10)
# Bound on remembered "unknown person" lookups (strangers can be many; known people are few).
_NEGATIVE_CACHE_MAX = 4096
# Tables whose rows belong to a space and follow a person when identities are linked.
_SPACE_TABLES = ("memories", "tasks", "skills", "ingest_queue")

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
)

PAIRING_TEXT = (
    "Hi! I don't know you yet. Your pairing code is {code} (valid for {minutes} more minutes). "
    "Send it to the owner of this bot: they approve it with /approve {code} "
    "(or `memgate pairing approve {code}` on the server)."
)
TOO_MANY_PENDING_TEXT = ("Sorry, too many access requests are already waiting for the owner. "
                         "Please try again later.")
DENIED_TEXT = "Sorry, your access request was declined."
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
    """One person on one channel, with their role and (private) user space."""

    channel: str
    external_id: str
    space_id: str
    role: Role
    display_name: str

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.external_id}"


@dataclass(frozen=True, slots=True)
class Allowed:
    """The message may go on: who sent it, the spaces recall may read and the one it writes to."""

    identity: Identity
    space_ids: tuple[str, ...]
    write_space: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The message stops here; `reply` is what to answer (None = stay silent)."""

    reply: str | None


@dataclass(frozen=True, slots=True)
class PairingRequest:
    """A stranger waiting for the owner to approve their code."""

    code: str
    channel: str
    external_id: str
    display_name: str
    chat_id: str
    created_at: datetime
    expires_at: datetime

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.external_id}"


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
    return Identity(row[0], row[1], row[2], Role(row[3]), row[4])


_ID_COLUMNS = "channel, external_id, space_id, role, display_name"


class Access:
    """Decides, per inbound message, whether it goes on and in which spaces."""

    PUBLIC_SPACE = PUBLIC_SPACE

    def __init__(self, store: Store, config: AccessConfig, *, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self._owners = frozenset(config.owners)
        self._allow = frozenset(config.allow)
        self._groups = frozenset(config.groups)
        self._cache: dict[str, Identity | None] = {}
        self._generation = 0            # bumped on every write: stale reads never enter the cache
        self._group_spaces: set[str] = set()
        self._warned_groups: set[str] = set()

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
            if console or key in self._owners or (self.config.dm_policy != "disabled" and (
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
        return Allowed(ident, (ident.space_id, PUBLIC_SPACE), ident.space_id)

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
        return await self._pair(msg)

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
            now = self._now()

            def write(con: Conn) -> None:
                ensure_space(con, space, "group", group_key, now)
                ensure_space(con, PUBLIC_SPACE, "public", "public", now)

            await self.store.awrite(write)
            self._group_spaces.add(space)
        if ident is None:
            # An unknown member speaks in the group space only; they are not stored, so a group
            # never becomes a way around DM pairing.
            ident = Identity(msg.channel, msg.sender_id, space, Role.USER, msg.sender_name or msg.sender_id)
        return Allowed(ident, (space, PUBLIC_SPACE), space)

    # --- identities ------------------------------------------------------------------------
    async def identity(self, channel: str, external_id: str) -> Identity | None:
        """The stored identity (cached), or None for someone never let in."""
        key = f"{channel}:{external_id}"
        if key in self._cache:
            return self._cache[key]
        generation = self._generation
        row = await self.store.aread(lambda con: con.execute(
            f"SELECT {_ID_COLUMNS} FROM identities WHERE channel = ? AND external_id = ?",
            [channel, external_id]).fetchone())
        ident = self._effective(_row_identity(row)) if row else None
        if generation == self._generation:
            self._remember(ident, key)
        return ident

    async def users(self) -> list[Identity]:
        """Every stored identity, oldest first."""
        rows = await self.store.aread(lambda con: con.execute(
            f"SELECT {_ID_COLUMNS} FROM identities ORDER BY created_at, channel, external_id").fetchall())
        return [self._effective(_row_identity(r)) for r in rows]

    def is_admin(self, identity: Identity) -> bool:
        """Owner or admin, by the latest role known here."""
        return self._role_now(identity) in (Role.OWNER, Role.ADMIN)

    async def set_role(self, who: str, role: Role, by: Identity) -> Identity:
        """Change a person's role. Admins manage users; only the owner makes or changes admins;
        nobody changes the owner's role."""
        role = Role(role)
        if not self.is_admin(by):
            raise AccessError("only the owner or an admin can change roles")
        target = await self._resolve(who)
        by_owner = self._role_now(by) is Role.OWNER
        if target.role is Role.OWNER:
            raise AccessError(f"{target.display_name} ({target.key}) is the owner; the owner's role cannot be changed")
        if role in (Role.OWNER, Role.ADMIN) and not by_owner:
            raise AccessError(f"only the owner can make someone {role.value}")
        if target.role is Role.ADMIN and not by_owner:
            raise AccessError(f"only the owner can change the role of an admin ({target.display_name})")
        now = self._now()

        def write(con: Conn) -> None:
            con.execute("UPDATE identities SET role = ?, updated_at = ? WHERE channel = ? AND external_id = ?",
                        [role.value, now, target.channel, target.external_id])

        await self._write(write)
        log.info("role of %s set to %s by %s", target.key, role.value, by.key)
        changed = Identity(target.channel, target.external_id, target.space_id, role, target.display_name)
        self._remember(changed)
        return changed

    # --- pairing ---------------------------------------------------------------------------
    async def approve(self, code: str, by: Identity | None) -> Identity:
        """Let the stranger holding `code` in; `by` None means the server's command line."""
        self._require_admin(by, "approve")
        code, now = normalize_code(code), self._now()

        def write(con: Conn) -> Identity:
            req = self._open_request(con, code, now)
            channel, external_id, name = req[1], req[2], req[3]
            existing = self._select(con, channel, external_id)
            if existing is None:
                role = self._approval_role(con, f"{channel}:{external_id}")
                existing = self._insert_identity(con, channel, external_id, name, role, now)
            con.execute("UPDATE pairing_requests SET status = 'approved', decided_by = ?, decided_at = ? WHERE code = ?",
                        [by.key if by else "cli", now, code])
            return existing

        ident = self._effective(await self._write(write))
        self._remember(ident)
        log.info("pairing approved: %s as %s by %s", ident.key, ident.role.value, by.key if by else "cli")
        return ident

    async def deny(self, code: str, by: Identity | None) -> None:
        """Refuse the stranger holding `code`; they hear 'declined' for the pairing TTL."""
        self._require_admin(by, "deny")
        code, now = normalize_code(code), self._now()

        def write(con: Conn) -> str:
            req = self._request(con, code)
            con.execute("UPDATE pairing_requests SET status = 'denied', decided_by = ?, decided_at = ? WHERE code = ?",
                        [by.key if by else "cli", now, code])
            return f"{req[1]}:{req[2]}"

        key = await self._write(write)
        log.info("pairing denied: %s by %s", key, by.key if by else "cli")

    async def pending(self) -> list[PairingRequest]:
        """Requests still waiting and not expired, oldest first."""
        now = self._now()
        rows = await self.store.aread(lambda con: con.execute(
            """SELECT code, channel, external_id, display_name, chat_id, created_at, expires_at
               FROM pairing_requests WHERE status = 'pending' AND expires_at > ? ORDER BY created_at, code""",
            [now]).fetchall())
        return [PairingRequest(*r) for r in rows]

    async def _pair(self, msg: Message) -> Refused:
        """A stranger's DM under the pairing policy: their (same, still valid) code, or a refusal."""
        now, ttl = self._now(), timedelta(minutes=self.config.pairing_ttl_minutes)

        def write(con: Conn) -> tuple[str, str | None, datetime | None]:
            row = con.execute(
                """SELECT code, expires_at FROM pairing_requests WHERE channel = ? AND external_id = ?
                   AND status = 'pending' AND expires_at > ? ORDER BY created_at DESC LIMIT 1""",
                [msg.channel, msg.sender_id, now]).fetchone()
            if row:
                return "code", row[0], row[1]
            denied = con.execute(
                """SELECT 1 FROM pairing_requests WHERE channel = ? AND external_id = ?
                   AND status = 'denied' AND decided_at > ?""",
                [msg.channel, msg.sender_id, now - ttl]).fetchone()
            if denied:
                return "denied", None, None
            waiting = con.execute("SELECT count(*) FROM pairing_requests WHERE status = 'pending' AND expires_at > ?",
                                  [now]).fetchone()[0]
            if waiting >= self.config.max_pending:
                return "full", None, None
            code = self._unique_code(con, "pairing_requests")
            con.execute(
                """INSERT INTO pairing_requests (code, channel, external_id, display_name, chat_id, created_at, expires_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                [code, msg.channel, msg.sender_id, msg.sender_name or msg.sender_id, msg.chat_id, now, now + ttl])
            log.info("pairing requested by %s:%s", msg.channel, msg.sender_id)
            return "code", code, now + ttl

        outcome, code, expires = await self._write(write)
        if outcome == "denied":
            return Refused(DENIED_TEXT)
        if outcome == "full":
            log.info("pairing refused for %s:%s: %s requests pending", msg.channel, msg.sender_id,
                     self.config.max_pending)
            return Refused(TOO_MANY_PENDING_TEXT)
        minutes = max(1, math.ceil((expires - now).total_seconds() / 60))
        return Refused(PAIRING_TEXT.format(code=code, minutes=minutes))

    # --- linking ---------------------------------------------------------------------------
    async def link_code(self, identity: Identity) -> str:
        """A one-time code (10 minutes) that another account of this person redeems to share its space."""
        now = self._now()

        def write(con: Conn) -> str:
            me = self._select(con, identity.channel, identity.external_id)
            if me is None or me.role is Role.BLOCKED:
                raise AccessError("linking is for people I know: send /link to me in a direct message")
            con.execute("UPDATE link_codes SET status = 'replaced' WHERE channel = ? AND external_id = ? AND status = 'open'",
                        [me.channel, me.external_id])
            code = self._unique_code(con, "link_codes")
            con.execute("INSERT INTO link_codes (code, channel, external_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                        [code, me.channel, me.external_id, now, now + LINK_TTL])
            return code

        return await self._write(write)

    async def redeem_link(self, code: str, identity: Identity) -> Identity:
        """`identity` joins the space of the code's issuer; its old space's memories move along."""
        code, now = normalize_code(code), self._now()

        def write(con: Conn) -> tuple[Identity, dict[str, int]]:
            row = con.execute("SELECT channel, external_id, status, expires_at FROM link_codes WHERE code = ?",
                              [code]).fetchone()
            if row is None or row[2] != "open":
                raise AccessError(f"no open link code {code}: send /link again on your other account")
            if row[3] <= now:
                raise AccessError(f"link code {code} has expired: send /link again on your other account")
            issuer = self._select(con, row[0], row[1])
            me = self._select(con, identity.channel, identity.external_id)
            if issuer is None:
                raise AccessError("the account that made this code is gone")
            if me is None or me.role is Role.BLOCKED:
                raise AccessError("send the link code to me in a direct message")
            if me.key == issuer.key:
                raise AccessError("this code is yours: send it from your other account")
            con.execute("UPDATE link_codes SET status = 'used', used_by = ?, used_at = ? WHERE code = ?",
                        [me.key, now, code])
            old, target = me.space_id, issuer.space_id
            moved: dict[str, int] = {}
            if old != target:
                for table in _SPACE_TABLES:
                    moved[table] = con.execute(f"UPDATE {table} SET space_id = ? WHERE space_id = ?",
                                               [target, old]).fetchone()[0]
                # Everyone already linked to the redeemer comes along: one person, one space.
                con.execute("UPDATE identities SET space_id = ?, updated_at = ? WHERE space_id = ?", [target, now, old])
            return Identity(me.channel, me.external_id, target, me.role, me.display_name), moved

        ident, moved = await self._write(write)
        log.info("linked %s into space %s (moved %s)", ident.key, ident.space_id, moved)
        ident = self._effective(ident)
        self._remember(ident)
        return ident

    # --- internals -------------------------------------------------------------------------
    def _now(self) -> datetime:
        return utc_naive(self.clock())

    def _effective(self, ident: Identity) -> Identity:
        """Configured owners are owners whatever the table says (config is the authority)."""
        if ident.key in self._owners and ident.role is not Role.OWNER:
            return Identity(ident.channel, ident.external_id, ident.space_id, Role.OWNER, ident.display_name)
        return ident

    def _role_now(self, identity: Identity) -> Role:
        """The stored role, not the one in a possibly stale Identity (an admin demoted meanwhile)."""
        if identity.key in self._owners:
            return Role.OWNER
        if identity.key not in self._cache:
            # Rare (admin commands right after a write): one primary-key read, off no hot path.
            row = self.store.read(lambda con: con.execute(
                f"SELECT {_ID_COLUMNS} FROM identities WHERE channel = ? AND external_id = ?",
                [identity.channel, identity.external_id]).fetchone())
            self._remember(self._effective(_row_identity(row)) if row else None, identity.key)
        cached = self._cache.get(identity.key)
        return cached.role if cached is not None else identity.role

    def _remember(self, ident: Identity | None, key: str | None = None) -> None:
        """Cache a lookup result; callers hold no await between reading and calling this."""
        if ident is None and len(self._cache) >= _NEGATIVE_CACHE_MAX:
            self._cache = {k: v for k, v in self._cache.items() if v is not None}
        self._cache[key or ident.key] = ident

    def _require_admin(self, by: Identity | None, action: str) -> None:
        if by is not None and not self.is_admin(by):
            raise AccessError(f"only the owner or an admin can {action} pairing codes")

    async def _write(self, fn: Callable[[Conn], object]):
        try:
            return await self.store.awrite(fn)
        finally:
            self._generation += 1
            self._cache.clear()

    async def _create(self, msg: Message) -> Identity:
        """Store a person let in without pairing (console, configured owner, allowlist, open)."""
        key, now = f"{msg.channel}:{msg.sender_id}", self._now()
        if key in self._owners:
            role = Role.OWNER
        elif msg.channel == CONSOLE_CHANNEL and not self._owners:
            role = Role.OWNER
        else:
            role = Role.USER
        ident = await self._write(lambda con: self._select(con, msg.channel, msg.sender_id) or self._insert_identity(
            con, msg.channel, msg.sender_id, msg.sender_name or msg.sender_id, role, now))
        log.info("new identity %s (%s)", ident.key, ident.role.value)
        ident = self._effective(ident)
        self._remember(ident)
        return ident

    async def _rename(self, ident: Identity, name: str) -> Identity:
        now = self._now()
        await self._write(lambda con: con.execute(
            "UPDATE identities SET display_name = ?, updated_at = ? WHERE channel = ? AND external_id = ?",
            [name, now, ident.channel, ident.external_id]))
        renamed = Identity(ident.channel, ident.external_id, ident.space_id, ident.role, name)
        self._remember(renamed)
        return renamed

    async def _resolve(self, who: str) -> Identity:
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

    def _approval_role(self, con: Conn, key: str) -> Role:
        """The first approval becomes owner when no owner is configured or approved yet.

        The console's implicit owner does not count: the local terminal user still needs an owner
        who can run admin commands from chat.
        """
        if key in self._owners:
            return Role.OWNER
        if self._owners:
            return Role.USER
        has_owner = con.execute("SELECT 1 FROM identities WHERE role = 'owner' AND channel <> ? LIMIT 1",
                                [CONSOLE_CHANNEL]).fetchone()
        return Role.USER if has_owner else Role.OWNER

    @staticmethod
    def _select(con: Conn, channel: str, external_id: str) -> Identity | None:
        row = con.execute(f"SELECT {_ID_COLUMNS} FROM identities WHERE channel = ? AND external_id = ?",
                          [channel, external_id]).fetchone()
        return _row_identity(row) if row else None

    @staticmethod
    def _insert_identity(con: Conn, channel: str, external_id: str, name: str, role: Role, now: datetime) -> Identity:
        space = new_id("u")
        ensure_space(con, space, "user", name, now)
        ensure_space(con, PUBLIC_SPACE, "public", "public", now)
        con.execute(f"INSERT INTO identities ({_ID_COLUMNS}, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [channel, external_id, space, role.value, name, now, now])
        return Identity(channel, external_id, space, role, name)

    @staticmethod
    def _request(con: Conn, code: str) -> tuple:
        row = con.execute("SELECT code, channel, external_id, display_name, status, expires_at FROM pairing_requests "
                          "WHERE code = ?", [code]).fetchone()
        if row is None:
            raise AccessError(f"no pairing request with code {code}: check the code (it is 8 characters)")
        if row[4] != "pending":
            raise AccessError(f"pairing code {code} was already {row[4]}")
        return row

    def _open_request(self, con: Conn, code: str, now: datetime) -> tuple:
        row = self._request(con, code)
        if row[5] <= now:
            raise AccessError(f"pairing code {code} has expired: ask them to message the bot again for a new code")
        return row

    @staticmethod
    def _unique_code(con: Conn, table: str) -> str:
        while True:
            code = new_code()
            if con.execute(f"SELECT 1 FROM {table} WHERE code = ?", [code]).fetchone() is None:
                return code

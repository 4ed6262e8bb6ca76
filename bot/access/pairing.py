"""DM pairing: a stranger gets a code, the owner (or an admin) approves or denies it.

Requests live in `pairing_requests` (created by migration 200 in bot/access/schema.py). A stranger keeps
the same code while it is valid; a denied stranger hears "declined" for the pairing TTL.

Strangers cannot starve each other: the waiting list is bounded (`max_pending`) and a new
request expires the oldest waiting one instead of being refused, while each stranger gets at
most `pairing_codes_per_hour` codes, so no one can churn the list alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.access.codes import normalize_code
from bot.access.identities import CONSOLE_CHANNEL, AccessError, Identity, Role
from bot.access.policy import Access, Refused
from bot.message import Message
from memory.store.connection import Conn

log = logging.getLogger(__name__)

_CODE_WINDOW = timedelta(hours=1)   # the per-stranger code limit counts over this window

# Only what works while the gateway runs: the owner's /approve in chat. (`memgate pairing approve`
# cannot open the database the running gateway holds.)
PAIRING_TEXT = (
    "Hi! I don't know you yet. Your pairing code is {code} (valid for {minutes} more minutes). "
    "Send it to the owner of this bot: they let you in by sending /approve {code} to me in their own chat with me."
)
CODES_PER_HOUR_TEXT = ("Sorry, you already asked for {n} pairing codes in the last hour. "
                       "Please write again in {minutes} minutes.")
DENIED_TEXT = "Sorry, your access request was declined."
APPROVED_TEXT = "Good news: the owner let you in. Just write to me; I remember what you tell me. Send /help for commands."


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


@dataclass(frozen=True, slots=True)
class Admission:
    """An approved request: who is in now, and the chat to tell them in."""

    identity: Identity
    chat_id: str


class Pairing:
    """Pairing codes for strangers' DMs, and the owner's approve / deny / pending list."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self.config = access.config

    async def approve(self, code: str, by: Identity | None) -> Admission:
        """Let the stranger holding `code` in; `by` None means the server's command line."""
        self._require_admin(by, "approve")
        code, now = normalize_code(code), self.access.now()

        def write(con: Conn) -> tuple[Identity, str]:
            req = self._open_request(con, code, now)
            channel, external_id, name, chat_id = req[1], req[2], req[3], req[6]
            existing = self.access.select(con, channel, external_id)
            if existing is None:
                role = self._approval_role(con, f"{channel}:{external_id}")
                existing = self.access.insert_identity(con, channel, external_id, name, role, now)
            con.execute("UPDATE pairing_requests SET status = 'approved', decided_by = ?, decided_at = ? WHERE code = ?",
                        [by.key if by else "cli", now, code])
            return existing, chat_id

        ident, chat_id = await self.access.write(write)
        ident = self.access.effective(ident)
        self.access.remember(ident)
        log.info("pairing approved: %s as %s by %s", ident.key, ident.role.value, by.key if by else "cli")
        return Admission(ident, chat_id)

    async def deny(self, code: str, by: Identity | None) -> None:
        """Refuse the stranger holding `code`; they hear 'declined' for the pairing TTL."""
        self._require_admin(by, "deny")
        code, now = normalize_code(code), self.access.now()

        def write(con: Conn) -> str:
            req = self._request(con, code)
            con.execute("UPDATE pairing_requests SET status = 'denied', decided_by = ?, decided_at = ? WHERE code = ?",
                        [by.key if by else "cli", now, code])
            return f"{req[1]}:{req[2]}"

        key = await self.access.write(write)
        log.info("pairing denied: %s by %s", key, by.key if by else "cli")

    async def pending(self) -> list[PairingRequest]:
        """Requests still waiting and not expired, oldest first."""
        now = self.access.now()
        rows = await self.access.store.aread(lambda con: con.execute(
            """SELECT code, channel, external_id, display_name, chat_id, created_at, expires_at
               FROM pairing_requests WHERE status = 'pending' AND expires_at > ? ORDER BY created_at, code""",
            [now]).fetchall())
        return [PairingRequest(*r) for r in rows]

    async def ring(self, msg: Message) -> Refused:
        """A stranger's DM under the pairing policy: their (same, still valid) code, or a refusal."""
        now, ttl = self.access.now(), timedelta(minutes=self.config.pairing_ttl_minutes)

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
            recent = con.execute(
                """SELECT count(*), min(created_at) FROM pairing_requests
                   WHERE channel = ? AND external_id = ? AND created_at > ?""",
                [msg.channel, msg.sender_id, now - _CODE_WINDOW]).fetchone()
            if recent[0] >= self.config.pairing_codes_per_hour:
                return "churn", None, recent[1] + _CODE_WINDOW
            # Bounded list: the oldest waiting requests expire to make room, never the newcomer.
            con.execute(
                """UPDATE pairing_requests SET status = 'expired', decided_by = 'newer requests', decided_at = $now
                   WHERE code IN (SELECT code FROM pairing_requests WHERE status = 'pending' AND expires_at > $now
                                  ORDER BY created_at DESC, code DESC OFFSET $keep)""",
                {"now": now, "keep": self.config.max_pending - 1})
            code = self.access.unique_code(con, "pairing_requests")
            con.execute(
                """INSERT INTO pairing_requests (code, channel, external_id, display_name, chat_id, created_at, expires_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                [code, msg.channel, msg.sender_id, msg.sender_name or msg.sender_id, msg.chat_id, now, now + ttl])
            log.info("pairing requested by %s:%s", msg.channel, msg.sender_id)
            return "code", code, now + ttl

        outcome, code, expires = await self.access.write(write)
        if outcome == "denied":
            return Refused(DENIED_TEXT)
        minutes = max(1, math.ceil((expires - now).total_seconds() / 60))
        if outcome == "churn":
            log.info("pairing refused for %s:%s: %s codes this hour", msg.channel, msg.sender_id,
                     self.config.pairing_codes_per_hour)
            return Refused(CODES_PER_HOUR_TEXT.format(n=self.config.pairing_codes_per_hour, minutes=minutes))
        return Refused(PAIRING_TEXT.format(code=code, minutes=minutes))

    # --- internals -------------------------------------------------------------------------
    def _require_admin(self, by: Identity | None, action: str) -> None:
        if by is not None and not self.access.is_admin(by):
            raise AccessError(f"only the owner or an admin can {action} pairing codes")

    def _approval_role(self, con: Conn, key: str) -> Role:
        """The first approval becomes owner when no owner is configured or approved yet.

        The console's implicit owner does not count: the local terminal user still needs an owner
        who can run admin commands from chat.
        """
        owners = self.access.owners
        if key in owners:
            return Role.OWNER
        if owners:
            return Role.USER
        has_owner = con.execute("SELECT 1 FROM identities WHERE role = 'owner' AND channel <> ? LIMIT 1",
                                [CONSOLE_CHANNEL]).fetchone()
        return Role.USER if has_owner else Role.OWNER

    @staticmethod
    def _request(con: Conn, code: str) -> tuple:
        row = con.execute("SELECT code, channel, external_id, display_name, status, expires_at, chat_id "
                          "FROM pairing_requests WHERE code = ?", [code]).fetchone()
        if row is None:
            raise AccessError(f"no pairing request with code {code}: check the code (it is 8 characters)")
        if row[4] == "expired":
            raise AccessError(f"pairing code {code} expired to make room for newer requests: "
                              "ask them to message the bot again for a new code")
        if row[4] != "pending":
            raise AccessError(f"pairing code {code} was already {row[4]}")
        return row

    def _open_request(self, con: Conn, code: str, now: datetime) -> tuple:
        row = self._request(con, code)
        if row[5] <= now:
            raise AccessError(f"pairing code {code} has expired: ask them to message the bot again for a new code")
        return row

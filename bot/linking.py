"""Identity linking: one person's accounts (Telegram, WeChat, ...) share one memory space.

`/link` gives a one-time code; the other account redeems it with `/link CODE`. Codes live in
`link_codes` (created by migration 200 in bot/access.py).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from bot.access import Access, AccessError, Identity, Role, normalize_code
from memory.store.connection import Conn

log = logging.getLogger(__name__)

LINK_TTL = timedelta(minutes=10)
# Tables whose rows belong to a space and follow a person when identities are linked.
_SPACE_TABLES = ("memories", "tasks", "skills", "ingest_queue")


class Linking:
    """Link codes: issue one, redeem one."""

    def __init__(self, access: Access) -> None:
        self.access = access

    async def link_code(self, identity: Identity) -> str:
        """A one-time code (10 minutes) that another account of this person redeems to share its space."""
        now = self.access.now()

        def write(con: Conn) -> str:
            me = self.access.select(con, identity.channel, identity.external_id)
            if me is None or me.role is Role.BLOCKED:
                raise AccessError("linking is for people I know: send /link to me in a direct message")
            con.execute("UPDATE link_codes SET status = 'replaced' WHERE channel = ? AND external_id = ? AND status = 'open'",
                        [me.channel, me.external_id])
            code = self.access.unique_code(con, "link_codes")
            con.execute("INSERT INTO link_codes (code, channel, external_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                        [code, me.channel, me.external_id, now, now + LINK_TTL])
            return code

        return await self.access.write(write)

    async def redeem_link(self, code: str, identity: Identity) -> Identity:
        """`identity` joins the space of the code's issuer; its old space's memories move along."""
        code, now = normalize_code(code), self.access.now()

        def write(con: Conn) -> tuple[Identity, dict[str, int]]:
            row = con.execute("SELECT channel, external_id, status, expires_at FROM link_codes WHERE code = ?",
                              [code]).fetchone()
            if row is None or row[2] != "open":
                raise AccessError(f"no open link code {code}: send /link again on your other account")
            if row[3] <= now:
                raise AccessError(f"link code {code} has expired: send /link again on your other account")
            issuer = self.access.select(con, row[0], row[1])
            me = self.access.select(con, identity.channel, identity.external_id)
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

        ident, moved = await self.access.write(write)
        log.info("linked %s into space %s (moved %s)", ident.key, ident.space_id, moved)
        ident = self.access.effective(ident)
        self.access.remember(ident)
        return ident

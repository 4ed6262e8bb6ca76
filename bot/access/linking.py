"""Identity linking: one person's accounts (Telegram, WeChat, the console) share one memory space.

The flow, all in direct messages (a code posted in a group is a code anyone there can use):
1. `offer`: account A sends /link and gets a one-time code (valid `link_code_minutes`).
2. `claim`: account B sends /link CODE. Nothing is shared yet. Both accounts are asked, each in
   its own DM, and each is shown the other by platform and id (never by display name, which
   anyone can set to look like anything) with the direction in words: B's new messages will be
   kept in A's memory, and B will read it.
3. `decide`: each answers /link yes or /link no; B joins A's space only when both said yes (a
   no from either spends the code). Both must agree because a code can be run backwards: an
   attacker's code pasted by a victim would otherwise file the victim's words in the
   attacker's memory on the attacker's yes alone.
B's earlier memories do not move into A's space: they stay in B's old space, which B keeps
reading (a kept space) and nobody else does. Each account may try `link_attempts_per_hour`
wrong codes an hour; then it is locked out until the hour has passed.

Offers live in `link_offers` and attempts in `link_attempts` (migration 220). The older
`link_codes` table (migration 200) is no longer used: its codes skipped the confirmation.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from bot.access.codes import normalize_code
from bot.access.identities import AccessError, Identity, Role
from bot.access.policy import Access
from bot.access.schema import IDENTITY_OF_SPACE
from bot.message import Message
from memory.erase import Dependent, EraseRules
from memory.store.connection import Conn, Migration

log = logging.getLogger(__name__)

LINKING_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        220,
        "link offers",
        """
        CREATE TABLE link_offers (
            code VARCHAR PRIMARY KEY,
            channel VARCHAR NOT NULL,           -- the issuer: whose space is joined, who confirms
            external_id VARCHAR NOT NULL,
            chat_id VARCHAR NOT NULL,           -- the issuer's DM, where the confirmation is asked
            status VARCHAR NOT NULL,            -- open | claimed | issuer_yes | claimant_yes | linked | refused | replaced
            created_at TIMESTAMP NOT NULL,
            expires_at TIMESTAMP NOT NULL,      -- of the code, then of the claim waiting for a yes
            claimant_channel VARCHAR,           -- the account that sent the code back
            claimant_id VARCHAR,
            claimant_name VARCHAR,
            claimant_chat_id VARCHAR,
            claimed_at TIMESTAMP,
            decided_at TIMESTAMP
        );
        CREATE TABLE link_attempts (
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            tried_at TIMESTAMP NOT NULL,
            ok BOOLEAN NOT NULL
        );
        """,
    ),
)

# An erased person's offers (as issuer or claimant) and attempts go with them.
LINKING_ERASE = EraseRules(dependents=(
    Dependent("link_offers", IDENTITY_OF_SPACE.format(t="link_offers") + " OR EXISTS (SELECT 1 FROM identities i "
              "WHERE i.space_id = $space AND i.channel = link_offers.claimant_channel AND i.external_id = link_offers.claimant_id)"),
    Dependent("link_attempts", IDENTITY_OF_SPACE.format(t="link_attempts")),
))

_ATTEMPT_WINDOW = timedelta(hours=1)
DM_ONLY_TEXT = ("Linking works only in a direct message with me, so no code is ever posted in a group. "
                "Send /link to me privately.")
LOCKED_TEXT = "Too many wrong link codes ({n} in the last hour). Please try again in {minutes} minutes."


@dataclass(frozen=True, slots=True)
class LinkOffer:
    code: str
    minutes: int


# Offers waiting for answers: the claim made, and which side has said yes so far.
WAITING = ("claimed", "issuer_yes", "claimant_yes")


@dataclass(frozen=True, slots=True)
class LinkClaim:
    """A code sent back by another account: both must now confirm, each in its own DM."""

    issuer: Identity
    issuer_chat_id: str
    claimant: Identity
    minutes: int
    claimant_chat_id: str = ""


@dataclass(frozen=True, slots=True)
class LinkDecision:
    """One account's answer. `outcome`: linked (both said yes), waiting (for the other's yes) or
    refused. `side` is who answered ("issuer" or "claimant"); the identities are as they are
    now (the claimant in the issuer's space when linked)."""

    outcome: Literal["linked", "waiting", "refused"]
    side: Literal["issuer", "claimant"]
    issuer: Identity
    issuer_chat_id: str
    claimant: Identity
    claimant_chat_id: str

    @property
    def linked(self) -> bool:
        """Both accounts said yes: the claimant now writes to the issuer's space."""
        return self.outcome == "linked"

    @property
    def other(self) -> tuple[Identity, str]:
        """The other account and its DM: who is told of this answer."""
        return (self.claimant, self.claimant_chat_id) if self.side == "issuer" else (self.issuer, self.issuer_chat_id)


class Linking:
    """Offer, claim and decide identity links (see the module docstring for the flow)."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self.config = access.config

    async def offer(self, identity: Identity, msg: Message) -> LinkOffer:
        """A fresh one-time code for `identity` (earlier open or waiting ones die)."""
        self._require_dm(msg)
        now, ttl = self.access.now(), timedelta(minutes=self.config.link_code_minutes)

        def write(con: Conn) -> str:
            me = self._known(con, identity, "linking is for people I know: send /link to me in a direct message")
            con.execute("""UPDATE link_offers SET status = 'replaced', decided_at = ?
                           WHERE channel = ? AND external_id = ? AND status IN ('open', 'claimed', 'issuer_yes',
                                                                                'claimant_yes')""",
                        [now, me.channel, me.external_id])
            code = self.access.unique_code(con, "link_offers")
            con.execute("""INSERT INTO link_offers (code, channel, external_id, chat_id, status, created_at, expires_at)
                           VALUES (?, ?, ?, ?, 'open', ?, ?)""",
                        [code, me.channel, me.external_id, msg.chat_id, now, now + ttl])
            return code

        return LinkOffer(await self.access.write(write), self.config.link_code_minutes)

    async def claim(self, code: str, identity: Identity, msg: Message) -> LinkClaim:
        """`identity` sends back a code: both accounts will be asked to confirm. Wrong codes count."""
        self._require_dm(msg)
        code, now = normalize_code(code), self.access.now()
        ttl = timedelta(minutes=self.config.link_code_minutes)
        limit = self.config.link_attempts_per_hour

        def write(con: Conn) -> tuple[str, object]:
            me = self._known(con, identity, "send the link code to me in a direct message")
            failed = con.execute(
                "SELECT count(*), min(tried_at) FROM link_attempts WHERE channel = ? AND external_id = ? AND NOT ok AND tried_at > ?",
                [me.channel, me.external_id, now - _ATTEMPT_WINDOW]).fetchone()
            if failed[0] >= limit:
                return "locked", failed[1] + _ATTEMPT_WINDOW
            row = con.execute("SELECT channel, external_id, chat_id, status, expires_at FROM link_offers WHERE code = ?",
                              [code]).fetchone()
            problem = None
            if row is None or row[3] != "open":
                problem = f"no open link code {code}: send /link again on your other account"
            elif row[4] <= now:
                problem = f"link code {code} has expired: send /link again on your other account"
            elif (row[0], row[1]) == (me.channel, me.external_id):
                problem = "this code is yours: send it from your other account"
            issuer = self.access.select(con, row[0], row[1]) if problem is None else None
            if problem is None and issuer is None:
                problem = "the account that made this code is gone"
            if problem is None and issuer.space_id == me.space_id:
                problem = "these accounts already share one memory"
            # Recorded in the same transaction as the outcome, and committed even when refused.
            con.execute("INSERT INTO link_attempts VALUES (?, ?, ?, ?)", [me.channel, me.external_id, now, problem is None])
            if problem is not None:
                return "refused", problem
            con.execute("""UPDATE link_offers SET status = 'claimed', claimant_channel = ?, claimant_id = ?,
                               claimant_name = ?, claimant_chat_id = ?, claimed_at = ?, expires_at = ?
                           WHERE code = ?""",
                        [me.channel, me.external_id, me.display_name, msg.chat_id, now, now + ttl, code])
            return "claimed", LinkClaim(issuer, row[2], me, self.config.link_code_minutes, msg.chat_id)

        outcome, detail = await self.access.write(write)
        if outcome == "locked":
            minutes = max(1, math.ceil((detail - now).total_seconds() / 60))
            log.warning("link attempts locked for %s", identity.key)
            raise AccessError(LOCKED_TEXT.format(n=limit, minutes=minutes))
        if outcome == "refused":
            raise AccessError(detail)
        log.info("link code of %s claimed by %s", detail.issuer.key, detail.claimant.key)
        return detail

    async def decide(self, identity: Identity, msg: Message, *, yes: bool) -> LinkDecision:
        """One account's answer to the claim waiting on it (as issuer or as claimant): the link is
        made on the second yes; a no from either side refuses it."""
        self._require_dm(msg)
        now = self.access.now()

        def write(con: Conn) -> LinkDecision:
            me = self._known(con, identity, "send /link yes or /link no to me in a direct message")
            row = con.execute(
                f"""SELECT code, channel, external_id, chat_id, claimant_channel, claimant_id, claimant_chat_id, status
                   FROM link_offers
                   WHERE status IN ({", ".join("?" * len(WAITING))}) AND expires_at > ?
                     AND ((channel = ? AND external_id = ?) OR (claimant_channel = ? AND claimant_id = ?))
                   ORDER BY claimed_at DESC LIMIT 1""",
                [*WAITING, now, me.channel, me.external_id, me.channel, me.external_id]).fetchone()
            if row is None:
                raise AccessError("no link is waiting for your confirmation: send /link to get a code first")
            code, issuer_chat, claimant_chat, status = row[0], row[3], row[6], row[7]
            side = "issuer" if (row[1], row[2]) == (me.channel, me.external_id) else "claimant"
            issuer, claimant = self.access.select(con, row[1], row[2]), self.access.select(con, row[4], row[5])
            if issuer is None or claimant is None or Role.BLOCKED in (issuer.role, claimant.role):
                raise AccessError("the other account is gone")
            if not yes:
                con.execute("UPDATE link_offers SET status = 'refused', decided_at = ? WHERE code = ?", [now, code])
                return LinkDecision("refused", side, issuer, issuer_chat, claimant, claimant_chat)
            other = "claimant" if side == "issuer" else "issuer"
            if status != f"{other}_yes":
                con.execute("UPDATE link_offers SET status = ? WHERE code = ?", [f"{side}_yes", code])
                return LinkDecision("waiting", side, issuer, issuer_chat, claimant, claimant_chat)
            if issuer.space_id == claimant.space_id:
                raise AccessError("these accounts already share one memory")
            con.execute("UPDATE link_offers SET status = 'linked', decided_at = ? WHERE code = ?", [now, code])
            old, target = claimant.space_id, issuer.space_id
            # Every account already sharing the claimant's space comes along (one person, one
            # space), and each keeps reading the old space; its memories stay where they are.
            con.execute("""INSERT INTO kept_spaces (channel, external_id, space_id, kept_at)
                           SELECT channel, external_id, space_id, ? FROM identities WHERE space_id = ?
                           ON CONFLICT DO NOTHING""", [now, old])
            con.execute("UPDATE identities SET space_id = ?, updated_at = ? WHERE space_id = ?", [target, now, old])
            return LinkDecision("linked", side, issuer, issuer_chat,
                                self.access.select(con, claimant.channel, claimant.external_id), claimant_chat)

        decision = await self.access.write(write)
        log.info("link of %s into %s's space: %s by the %s", decision.claimant.key, decision.issuer.key,
                 decision.outcome, decision.side)
        return decision

    # --- internals -------------------------------------------------------------------------
    @staticmethod
    def _require_dm(msg: Message) -> None:
        if msg.is_group:
            raise AccessError(DM_ONLY_TEXT)

    def _known(self, con: Conn, identity: Identity, refusal: str) -> Identity:
        me = self.access.select(con, identity.channel, identity.external_id)
        if me is None or me.role is Role.BLOCKED:
            raise AccessError(refusal)
        return me

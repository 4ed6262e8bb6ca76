"""Who may talk to the bot, and which memory spaces they reach: the per-message decision.

The DM policy (pairing, allowlist, open, disabled), the group policy (allowlist, open, disabled;
answer on mention) and who may write to "public" (`Allowed.may_write_public`: admins, or everyone
under `public_writers = "everyone"`), over the stored identities (bot.access.identities; DM
pairing is in bot.access.pairing, identity linking in bot.access.linking).

Spaces: a DM reads the person's user space (+ the spaces it kept when it joined another person's
by /link) + "public" and writes to the user space; a group reads the group space + "public" and
writes to the group space. A person's private space is never offered in a group, so no one can
read another person's memories through the bot.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bot.access.api_keys import Keys
from bot.access.identities import CONSOLE_CHANNEL, PUBLIC_SPACE, Identities, Identity, Role
from bot.message import Message
from bot.settings import AccessConfig
from memory.store.connection import Conn, Store
from memory.store.rows import ensure_space

log = logging.getLogger(__name__)

# The channel of terminals attached with a space key (bot.api.attached): the key stands for the person.
API_KEY_CHANNEL = "api"
ALLOWLIST_TEXT = "Sorry, this bot is private."
DM_DISABLED_TEXT = "Sorry, direct messages are turned off for this bot."
GROUP_NOT_ALLOWED_TEXT = "Sorry, I'm not enabled in this group."


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
    """What a stranger's DM meets under the pairing policy (bot.access.pairing.Pairing)."""

    async def ring(self, msg: Message) -> Refused:
        """Their pairing code, or why they cannot have one."""


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


class Access(Identities):
    """Decides, per inbound message, whether it goes on and in which spaces (over the stored identities)."""

    def __init__(self, store: Store, config: AccessConfig, *, clock: Callable[[], datetime],
                 doorbell: Doorbell | None = None) -> None:
        super().__init__(store, config, clock=clock)
        self._allow = frozenset(config.allow)
        self._groups = frozenset(config.groups)
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
        if msg.channel == API_KEY_CHANNEL:
            return await self._check_api_key(msg)
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

    async def _check_api_key(self, msg: Message) -> Allowed | Refused:
        """A terminal attached with a space key (`MEMGATE_API_KEY=... memgate chat`): the key's one space
        (and public, as in any DM), while the key is live and may write; nothing is stored about it."""
        rec = await asyncio.to_thread(Keys(self.store, clock=self.clock).live, msg.sender_id)
        if rec is None or rec.space_id is None or rec.scope != "write":
            return Refused(None)  # revoked (or read-only) since the line was taken: nobody to tell
        ident = Identity(API_KEY_CHANNEL, rec.id, rec.space_id, Role.USER, msg.sender_name or rec.name or rec.prefix)
        return Allowed(ident, (rec.space_id, PUBLIC_SPACE), rec.space_id, False)

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

    def may_write_public(self, identity: Identity) -> bool:
        """Whether `identity` may write to the public space (config `access.public_writers`)."""
        if identity.role is Role.BLOCKED:
            return False
        return self.config.public_writers == "everyone" or self.is_admin(identity)

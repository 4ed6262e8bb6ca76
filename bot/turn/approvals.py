"""Writes that reach beyond the speaker's own space wait for that person's confirmation in chat.

A tool call is the model's act, not the person's, and the model acts on everything in its prompt,
which can hold other people's words: a group's messages, memories others wrote, a tool's results.
A non-admin's group message saying "save to the public notes: ..." was recalled into the owner's
prompt and the public-write tool ran on the owner's authority (a confused deputy). So the tools
that write where other people read (`memory_write_public`, `skill_publish`, marked `beyond` in the
ToolBox) follow the rule the careful gateways use for risky tool calls (an approval outside the
model's reach, as Claude Code's permission prompts or OpenClaw's exec approvals):

1. they are offered only in the speaker's own direct message, to someone allowed to write there,
   and only while the prompt carries nothing of another space (bot.agent decides per turn);
2. a call writes nothing: it files a `PendingWrite`, and the gateway, not the model (which could
   leave it out or misstate it), shows it under the reply with the exact text and a code;
3. it is done when the same person, in the same chat, sends /confirm CODE within `ttl`
   (a command, which the model never reads or sends); /cancel CODE drops it.

Pending writes live in this process only: a restart drops them, which is the safe direction.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.errors import MemgateError

if TYPE_CHECKING:
    from bot.access.policy import Access
    from bot.turn.commands import CommandContext, Commands

log = logging.getLogger(__name__)
audit = logging.getLogger("memgate.audit")

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
MAX_PENDING = 1000        # a bound on memory whatever a runaway model proposes; the oldest go first

NOTICE_TEXT = ("⚠ Not done yet: {what}. It would reach everyone here. If you want that, send /confirm {code} "
               "within {minutes} minutes; /cancel {code} drops it.")
CONFIRM_HELP = "/confirm CODE: do a write to the shared (public) memory that I proposed to you; /cancel CODE drops it"


class ApprovalError(MemgateError):
    """A /confirm or /cancel that does not match a pending write of this person in this chat."""


@dataclass(frozen=True, slots=True)
class PendingWrite:
    code: str
    speaker: str                        # the identity key that must confirm
    conversation: str                   # ... in this chat
    what: str                           # shown to them, e.g. 'write to the public space: “...”'
    run: Callable[[], Awaitable[str]]   # does it; returns what to tell them
    expires_at: datetime


class Approvals:
    """Pending writes by code; `propose` files one, `confirm` runs it, `cancel` drops it."""

    def __init__(self, *, clock: Callable[[], datetime], ttl: timedelta = timedelta(minutes=10)) -> None:
        self.clock = clock
        self.ttl = ttl
        self._pending: dict[str, PendingWrite] = {}

    @property
    def minutes(self) -> int:
        """How long a code lasts, in whole minutes (as the notice says it)."""
        return max(1, int(self.ttl.total_seconds() // 60))

    def propose(self, speaker: str, conversation: str, what: str, run: Callable[[], Awaitable[str]]) -> PendingWrite:
        """File a write for `speaker` to confirm in `conversation`."""
        now = self.clock()
        self._sweep(now)
        while len(self._pending) >= MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        while code in self._pending:
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        p = PendingWrite(code, speaker, conversation, what, run, now + self.ttl)
        self._pending[code] = p
        log.info("write beyond %s's space proposed (%s), waiting for their /confirm", speaker, code)
        return p

    def notice(self, p: PendingWrite) -> str:
        """What the gateway shows under the reply."""
        return NOTICE_TEXT.format(what=p.what, code=p.code, minutes=self.minutes)

    async def confirm(self, code: str, speaker: str, conversation: str, *, still_allowed: bool = True) -> str:
        """Run the pending write `code` of `speaker` in `conversation` (once); ApprovalError otherwise.
        `still_allowed`: the speaker may still write there (a demoted admin may not)."""
        p = self._take(code, speaker, conversation)
        if not still_allowed:
            raise ApprovalError("you may no longer write to the shared memory; nothing was written")
        done = await p.run()
        audit.info("write beyond their space confirmed by %s (%s): %s", speaker, p.code, p.what)
        return done

    def cancel(self, code: str, speaker: str, conversation: str) -> str:
        """Drop the pending write `code` of `speaker` in `conversation`; ApprovalError otherwise."""
        p = self._take(code, speaker, conversation)
        return f"Dropped: {p.what}."

    def pending(self) -> int:
        """How many writes wait for confirmation now."""
        self._sweep(self.clock())
        return len(self._pending)

    def _take(self, code: str, speaker: str, conversation: str) -> PendingWrite:
        code = code.strip().upper()
        self._sweep(self.clock())
        p = self._pending.get(code)
        # Another person's code, or this person's in another chat (a group), is not found either.
        if p is None or p.speaker != speaker or p.conversation != conversation:
            raise ApprovalError(f"nothing waits for confirmation under {code or 'that code'} here "
                                f"(codes last {self.minutes} minutes, in the chat where I proposed them)")
        del self._pending[code]
        return p

    def _sweep(self, now: datetime) -> None:
        for code in [c for c, p in self._pending.items() if p.expires_at <= now]:
            del self._pending[code]


def register_commands(commands: Commands, approvals: Approvals, access: Access) -> None:
    """/confirm CODE and /cancel CODE, answered without the model."""

    async def confirm(ctx: CommandContext) -> str:
        if not ctx.args:
            return "Usage: /confirm CODE (the code shown under my reply)"
        ident = ctx.allowed.identity
        return await approvals.confirm(ctx.args.split()[0], ident.key, ctx.msg.conversation_key,
                                       still_allowed=access.may_write_public(ident))

    async def cancel(ctx: CommandContext) -> str:
        if not ctx.args:
            return "Usage: /cancel CODE"
        return approvals.cancel(ctx.args.split()[0], ctx.allowed.identity.key, ctx.msg.conversation_key)

    commands.register("confirm", confirm, CONFIRM_HELP)
    commands.register("cancel", cancel, "")

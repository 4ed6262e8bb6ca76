"""The Channel protocol every adapter implements, the callback it hands messages to, and the
optional start-up hooks the composition root (bot.app) fills in: who hears of channel trouble,
who stops a reply the person cancelled, and the command menu a platform can show; and the
optional capabilities a channel may have (a reply shown while it is written, media, health)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bot.message import Media, Message, Reply

# The gateway's entry point: an adapter awaits it for every inbound message. It returns once the
# message is durably in the inbox (queued, not answered; replies come back through Channel.send),
# and only then may the adapter acknowledge it to the platform (Telegram offset, iLink cursor,
# Official Account response). When it raises, the message was not recorded: the adapter must
# leave it unacknowledged so the platform delivers it again (or, with no platform, retry it).
InboundHandler = Callable[[Message], Awaitable[None]]

# Called by a channel with a line the owner must read: a lost login, replies the platform refuses.
TroubleHook = Callable[[str], Awaitable[None]]

# Called by a channel whose person asked to stop the reply being written (the terminal's Ctrl-C):
# (channel name, chat id) -> whether a turn in flight there was cancelled.
CancelHook = Callable[[str, str], Awaitable[bool]]


@runtime_checkable
class Channel(Protocol):
    """A messaging platform seen from the gateway.

    Lifecycle: `start(inbound)` begins receiving (long poll, webhook server, stdin) and returns
    once running; `stop()` stops receiving and waits for in-flight sends.
    """

    name: str

    async def start(self, inbound: InboundHandler) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply) -> None:
        """Deliver a reply, split and formatted for the platform.

        Raises ChannelError when it did not go out, with `permanent` set when retrying cannot
        help (blocked, chat gone) and `retry_after` when the platform said how long to wait.
        A channel may also offer `split(reply) -> list[Reply]`: the parts it sends as one message
        each, so the outbox can retry a failed part without repeating the ones before it.
        """
        ...

    def typing(self, message: Message) -> AbstractAsyncContextManager[None]:
        """Show 'typing...' in the message's chat while the agent works (a no-op where unsupported)."""
        ...


@runtime_checkable
class ReportsTrouble(Protocol):
    """A channel that can meet trouble only the owner can fix; `on_trouble` None = not wired yet."""

    on_trouble: TroubleHook | None


@runtime_checkable
class CancelsReplies(Protocol):
    """A channel whose person can stop the reply being written; `on_cancel` None = not wired yet.

    The message stays as said (in memory, in the session); only the reply is dropped."""

    on_cancel: CancelHook | None


# Reply.extra keys the outbox sets on a reply's parts when a draft of it was shown (ShowsDrafts):
# the handle of the draft message this part replaces, and (on the last part) the handles of draft
# messages the finished reply no longer needs, space-separated.
DRAFT = "draft"
DRAFT_DROP = "draft_drop"


@runtime_checkable
class Draft(Protocol):
    """A reply shown while the model writes it (`ShowsDrafts.open_draft`)."""

    # The least time between two `show`s (the platform's edit rate): what comes meanwhile is shown together.
    interval: float
    # The platform's ids of the messages shown so far, in order: recorded durably as they appear,
    # handed back to `open_draft` after a restart, and replaced by the reply's parts (DRAFT).
    handles: Sequence[str]

    async def show(self, text: str) -> bool:
        """The reply so far, whole (redacted markdown). It may be shorter than, or differ from, the
        last one shown (a retry writes the answer again). False: not shown yet (too little so
        far); the same text is offered again after `interval`. Raises ChannelError: nothing more
        is shown of this draft then; the reply still comes through `send`."""
        ...

    async def drop(self) -> None:
        """Nothing will be sent for this turn (the person cancelled it): take the draft away."""
        ...


@runtime_checkable
class ShowsDrafts(Protocol):
    """A channel that shows a reply growing while it is written: a terminal prints it, Telegram
    edits one message. The reply itself still comes through `send`, from the outbox, and must
    replace the draft: a part with `extra[DRAFT]` replaces that message instead of sending another
    (and removes those in `extra[DRAFT_DROP]`); a channel whose drafts have no handles (a terminal)
    replaces the chat's draft when its `send` comes."""

    def open_draft(self, reply: Reply, handles: Sequence[str] = ()) -> Draft | None:
        """A draft of `reply` (its address; the text comes through `Draft.show`), or None where this
        chat shows none. `handles`: what a previous run showed of this reply before it stopped
        mid-stream; the draft goes on in those messages instead of sending new ones."""
        ...


@dataclass(frozen=True, slots=True)
class MenuCommand:
    """One chat command as a platform's command menu shows it."""

    name: str  # without the slash
    description: str


@runtime_checkable
class ShowsCommandMenu(Protocol):
    """A channel whose platform shows a command menu (Telegram's setMyCommands)."""

    def set_command_menu(self, commands: Sequence[MenuCommand]) -> None:
        """Remember the menu; the channel registers it with the platform when it starts."""
        ...


@runtime_checkable
class HasLocalCommands(Protocol):
    """A channel that answers some commands itself (the terminal's /quit), listed in /help."""

    def local_commands(self) -> Sequence[tuple[str, str]]:
        """(name without the slash, help line; empty = not listed) for each such command."""
        ...


@runtime_checkable
class OneReceiver(Protocol):
    """A channel only one process may receive from (a bot's long poll: Telegram answers a second
    getUpdates with 409 Conflict; an iLink cursor is one reader's). `receive_lock` names what is
    polled, so processes sharing a database elect one receiver per bot."""

    receive_lock: str

    # Set by the gateway when processes share a database: asked before each poll, False while
    # another process is the receiver (this one lost the lock, e.g. when the database restarted):
    # the channel then does not poll, and asks again after a pause. None: always receive.
    may_receive: Callable[[], Awaitable[bool]] | None


@runtime_checkable
class ReportsHealth(Protocol):
    """A channel that can tell whether it is still receiving (its poll loop alive, its login valid).

    `/healthz` shows it per channel; a channel without it counts as up while the gateway runs.
    """

    def is_up(self) -> bool:
        ...


@runtime_checkable
class FetchesMedia(Protocol):
    """A channel that can fetch the bytes of what came with a message (a photo, a voice note, a
    file) by the platform's reference. The gateway never sees a platform URL or token.

    Raises MediaError: `too_large` when the platform says (or the download shows) it is over
    `max_bytes`, which retrying cannot help; otherwise (timeout, network, platform refusal) a
    later attempt may succeed.
    """

    async def fetch_media(self, media: Media, *, max_bytes: int, timeout: float) -> bytes:
        ...


@runtime_checkable
class KnowsReaders(Protocol):
    """A channel that knows whether anyone reads a person's messages right now (a terminal is read
    only while it is open). Something sent to nobody would be lost, so a reminder waits until
    `reader_chat` names the chat the person reads now (None: nobody reads it now)."""

    def reader_chat(self, recipient_id: str, chat_id: str) -> str | None:
        ...


@runtime_checkable
class LimitsReplies(Protocol):
    """A channel that may write to a person only within some hours of their last message (a WeChat
    Official Account's customer-service window: 48 hours). A reminder set for later is told so."""

    reply_window_hours: float

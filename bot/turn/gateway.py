"""The gateway: inbound message -> inbox -> per-conversation FIFO queue -> access -> command or
agent turn -> outbox -> the message's channel.

Nothing accepted is lost: a message is in the durable inbox before the adapter acknowledges it
to the platform, and its reply in the durable outbox before it is sent; a restart answers what
was accepted and not answered, and sends what was not delivered. A store that cannot be
written (disk full) holds a turn back, tells the person, and the turn runs once it can.

One turn in flight per conversation (its queue, bot.turn.queues, is bounded; overflow is told
to the sender, never dropped silently); many conversations in parallel.

Why one module of ~480 lines: its parts (start, and the standby that takes a receiver over on a
shared database; `inbound`'s recording order; a turn's processing; telling people) all read and
change the same per-conversation state: the queues, the holds of messages the inbox could not
record, the turns to cancel, the storage-down notices already sent, and the cluster's receiving
set. What stands alone has moved out (queues.py, attachments.py, sessions.py, bot/delivery/,
bot/access/); cutting the rest would hand that state from module to module.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bot.access.policy import Access, Allowed, Refused
from bot.channel import Channel, OneReceiver, ReportsHealth
from bot.delivery.cluster import Cluster
from bot.delivery.drafts import Drafts
from bot.delivery.inbox import Inbox, InboxEntry, platform_key
from bot.delivery.outbox import Outbox, OutboxSettings
from bot.errors import ChannelError, StoreError, StoreWriteError
from bot.media.reader import Attached, MediaReader
from bot.message import Kind, Message, Reply
from bot.observe import NoObserver, TurnObserver, TurnOutcome
from bot.turn.agent import Agent, TurnRequest, TurnResult
from bot.turn.attachments import InboxReadMarks, Waiting, WaitingAttachments, read_attachments
from bot.turn.commands import CommandContext, Commands
from bot.turn.queues import ConversationQueues
from bot.turn.sessions import Sessions
from bot.turn.tools import ToolContext
from memory.redaction import find_secrets

log = logging.getLogger(__name__)

OVERFLOW_TEXT = ("I still have {n} of your messages to answer, so I could not take this one. "
                 "Please send it again once I have replied.")
STORAGE_DOWN_TEXT = ("I could not save your message just now (my storage is full or failing). "
                     "I'll answer it as soon as storage is back; no need to send it again.")
UNSUPPORTED_TEXT = {
    Kind.VOICE: "Voice messages are not supported yet; please type your message.",
    Kind.STICKER: "I can't read stickers; please send me text.",
    Kind.PHOTO: "I can't see images yet; add a caption and I will answer it.",
    Kind.VIDEO: "I can't watch videos yet; please describe it in text.",
    Kind.FILE: "I can't open files yet; please paste the text.",
    Kind.EDITED: "I saw you edited a message; I answer new messages only, so please send the new text again.",
    Kind.OTHER: "I can only read text messages for now.",
}

# How long a message the inbox could not record holds back the later ones of its conversation
# (the platform hands it out again first; this bounds the wait if it never does).
UNRECORDED_HOLD_SECONDS = 120.0


@dataclass(frozen=True)
class GatewaySettings:
    queue_size: int = 20
    history_tokens: int = 2000
    public_space: str = "public"
    storage_retry: float = 5.0  # seconds between attempts to process what a full disk held back
    # Finished inbox/outbox receipts are kept this long (they recognise late redeliveries), then pruned.
    keep_receipts_days: float = 7.0
    prune_every: float = 3600.0
    # On a shared database: how often a standby checks whether a receiver died (and adopts what
    # dead processes left). A dead process's locks go at once; this is the takeover delay.
    takeover_every: float = 1.0
    # A message whose attachment could not be read yet is tried again this often, this many times.
    media_retry: float = 600.0
    media_attempts: int = 5
    media_waiting_per_person: int = 10  # messages of one sender kept waiting at once ([media] max_waiting_per_person)
    media_waiting: int = 500            # ... of everyone ([media] max_waiting)


class Gateway:
    """Routes messages between channels, the inbox, access control, commands, the agent and the outbox."""

    def __init__(self, *, access: Access, sessions: Sessions, agent: Agent | None, commands: Commands,
                 clock: Callable[[], datetime], settings: GatewaySettings | None = None,
                 inbox: Inbox | None = None, outbox_settings: OutboxSettings | None = None,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 observer: TurnObserver | None = None, cluster: Cluster | None = None,
                 media: MediaReader | None = None) -> None:
        self.access = access
        self.media = media
        self.observer = observer or NoObserver()
        self.sessions = sessions
        self.agent = agent
        self.commands = commands
        self.clock = clock
        self.settings = settings or GatewaySettings()
        self.channels: dict[str, Channel] = {}
        store = sessions.store
        self.cluster = cluster or (inbox.cluster if inbox is not None else Cluster(store, clock=clock))
        self.cluster.receiving = set()
        self.inbox = inbox or Inbox(store, clock=clock, cluster=self.cluster)
        self.waiting = WaitingAttachments(self.inbox, clock=clock, transcribes=media.transcriber is not None,
                                          retry_every=self.settings.media_retry, attempts=self.settings.media_attempts,
                                          per_person=self.settings.media_waiting_per_person,
                                          total=self.settings.media_waiting) if media is not None else None
        # Retries are due in real time, whatever clock the tests move.
        self.outbox = Outbox(store, self.channels, clock=wall_clock, settings=outbox_settings, observer=self.observer,
                             cluster=self.cluster)
        self.drafts = Drafts(store, clock=wall_clock)  # replies shown while they are written
        self.queues = ConversationQueues(self._process, held=self._held, retry_every=self.settings.storage_retry)
        self._told_storage_down: set[str] = set()
        # Per conversation: the first message the inbox could not record (platform key, when), so a
        # later one is not recorded, and answered, before it (see `inbound`).
        self._unrecorded: dict[str, tuple[str, float]] = {}
        # The agent turn in flight per conversation, set to stop it (cancel_turn).
        self._cancels: dict[str, asyncio.Event] = {}
        self._prune_task: asyncio.Task | None = None
        self._standby_task: asyncio.Task | None = None
        self._media_task: asyncio.Task | None = None
        self._running = False
        self._closing = False
        self.on_turn: Callable[[TurnResult], None] | None = None  # metrics hook (bench, /stats)

    def add_channel(self, channel: Channel) -> None:
        self.channels[channel.name] = channel

    async def start(self) -> None:
        """Start the channels (a one-receiver channel only where this process is its receiver),
        queue what a previous run, or a dead process, accepted but did not answer, then answer."""
        await asyncio.to_thread(self.cluster.join)
        standing_by = []
        for ch in self.channels.values():
            if isinstance(ch, OneReceiver) and self.cluster.shared:
                ch.may_receive = self._leads(ch.receive_lock)
            if isinstance(ch, OneReceiver) and not await asyncio.to_thread(self.cluster.lead, ch.receive_lock):
                log.info("%s: another process receives it; standing by to take over", ch.name)
                standing_by.append(ch)
                continue
            self.cluster.receiving.add(ch.name)
        await self._adopt()
        for ch in self.channels.values():
            if ch.name in self.cluster.receiving:
                await ch.start(self.inbound)
        self._running = True
        await self.outbox.start()
        self.queues.start()
        self._prune_task = asyncio.create_task(self._prune_receipts(), name="gateway-prune-receipts")
        if self.media is not None:
            self._media_task = asyncio.create_task(self._retry_media(), name="gateway-retry-media")
        if self.cluster.shared:
            self._standby_task = asyncio.create_task(self._stand_by(standing_by), name="gateway-standby")

    async def _adopt(self) -> None:
        """Queue the pending messages of the conversations this process takes over (all of them
        at the start of a single process; a dead process's on a shared database)."""
        keys = await asyncio.to_thread(self.cluster.adopt, sorted(self.cluster.receiving))
        if not keys:
            return
        if self.cluster.shared:
            log.info("took over %d conversation(s) with pending work from processes no longer running", len(keys))
        for entry in await asyncio.to_thread(self.inbox.pending, keys):
            self.queues.adopt(entry)
        self.queues.wake(keys)
        self.outbox.wake()

    def _leads(self, lock: str) -> Callable[[], Awaitable[bool]]:
        """A one-receiver channel's check before each poll: still (or again) its receiver?"""
        async def leads() -> bool:
            return await asyncio.to_thread(self.cluster.lead, lock)
        return leads

    async def _stand_by(self, waiting: list[Channel]) -> None:
        """On a shared database: take over a one-receiver channel when its receiver dies, and
        adopt the conversations dead processes left (checked every `takeover_every` seconds).
        Each pass first checks the lock session: after the database restarted, every lock was
        taken back or found taken (a lost worker number means joining anew; a receiver whose lock
        went elsewhere stops polling by itself, asked before each poll)."""
        while True:
            await asyncio.sleep(self.settings.takeover_every)
            try:
                lost = await asyncio.to_thread(self.cluster.check)
                if lost:
                    log.warning("%d receiver lock(s) went to another process while the database was away", len(lost))
                for ch in list(waiting):
                    if await asyncio.to_thread(self.cluster.lead, ch.receive_lock):
                        log.info("%s: its receiver stopped; this process receives it now", ch.name)
                        self.cluster.receiving.add(ch.name)
                        await self._adopt()  # before polling: a redelivered update finds its row adopted
                        await ch.start(self.inbound)
                        waiting.remove(ch)
                await self._adopt()
            except StoreError as exc:  # the database is away (restarting): one line a pass, no traceback
                log.warning("taking over from a stopped process waits for the database: %s", exc)
            except Exception:
                log.exception("taking over from a stopped process failed; retrying")

    async def stop(self, timeout: float = 60.0) -> None:
        """Stop receiving, answer what is already queued (bounded by `timeout`), stop channels."""
        # First stop taking messages in: what is accepted later waits in the inbox for the next run.
        for ch in self.channels.values():
            stop_receiving = getattr(ch, "stop_receiving", None)
            if stop_receiving is not None:
                try:
                    await stop_receiving()
                except Exception:
                    log.exception("channel %s did not stop receiving cleanly", ch.name)
        self._closing = True
        for task in (self._prune_task, self._standby_task, self._media_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.queues.stop(timeout)
        await self.outbox.stop()
        for ch in self.channels.values():
            try:
                await ch.stop()
            except Exception:
                log.exception("channel %s did not stop cleanly", ch.name)

    def channel_health(self) -> dict[str, bool]:
        """Per channel: receiving now? (its own report, else whether the gateway is running)."""
        return {name: (ch.is_up() if isinstance(ch, ReportsHealth) else True) and self._running and not self._closing
                for name, ch in self.channels.items()}

    async def idle(self) -> None:
        """Wait until every conversation queue is empty and what is due has been sent (tests, benchmarks)."""
        await self.queues.idle()

    # --- inbound ---------------------------------------------------------------------------
    async def inbound(self, msg: Message) -> None:
        """The adapters' callback: record the message durably, then queue it. Returns quickly.

        When this returns the message is in the inbox, so the adapter may acknowledge it to the
        platform. When it raises (the store cannot be written) the adapter must not: the
        platform redelivers and the message is recorded then.
        """
        key = msg.conversation_key
        waiting = self.queues.waiting(key)
        if waiting >= self.settings.queue_size and not self._closing:
            log.warning("queue full for %s; told the sender", key)
            await self._send_now(msg, OVERFLOW_TEXT.format(n=waiting))
            return
        pkey = platform_key(msg)
        earlier = self._unrecorded.get(key)
        if earlier is not None and earlier[0] != pkey and time.monotonic() - earlier[1] < UNRECORDED_HOLD_SECONDS:
            # An earlier message of this conversation could not be recorded: this one waits for it
            # (recorded first, it would be answered first), and its sender hears why: once per
            # person while that first message waits, not once per message they send meanwhile.
            await self._tell_storage_down(msg, f"in:{key}:{msg.sender_id}:{earlier[0]}")
            raise StoreWriteError(f"an earlier message in {key} is not recorded yet")
        try:
            entry = await asyncio.to_thread(self.inbox.accept, msg)
        except Exception as exc:
            # Whatever went wrong, the message was not recorded (no commit was confirmed): the
            # channel must leave it unacknowledged, whatever the error's type.
            log.error("inbox: cannot record a message in %s (%s); the channel keeps it unacknowledged", key, exc)
            if earlier is None or earlier[0] == pkey or time.monotonic() - earlier[1] >= UNRECORDED_HOLD_SECONDS:
                if len(self._unrecorded) > 10_000:
                    self._unrecorded.clear()
                self._unrecorded[key] = (pkey, time.monotonic())
            anchor = self._unrecorded.get(key, (pkey, 0.0))[0]
            await self._tell_storage_down(msg, f"in:{key}:{msg.sender_id}:{anchor}")
            if isinstance(exc, StoreWriteError):
                raise
            raise StoreWriteError(f"the message could not be recorded: {type(exc).__name__}: {exc}") from exc
        if earlier is not None and earlier[0] == pkey:
            del self._unrecorded[key]
        if entry is None:
            log.info("inbox: %s redelivered a message already accepted in %s; not answered again", msg.channel, key)
            return
        if self._closing:
            return  # recorded: the next run answers it
        self.queues.put(entry)

    async def _prune_receipts(self) -> None:
        """Drop finished inbox/outbox receipts past their keep time (at start, then periodically)."""
        while True:
            cutoff = self.clock() - timedelta(days=self.settings.keep_receipts_days)
            try:
                dropped = await asyncio.to_thread(self.inbox.prune, cutoff) + await asyncio.to_thread(self.outbox.prune, cutoff)
                if dropped:
                    log.info("pruned %d delivery receipts older than %s days", dropped, self.settings.keep_receipts_days)
            except StoreWriteError as exc:
                log.warning("pruning delivery receipts failed (%s); next pass retries", exc)
            await asyncio.sleep(self.settings.prune_every)

    async def _retry_media(self) -> None:
        """Queue again what waits for its attachment: everything at the start, then every `media_retry` s."""
        await self.retry_waiting(everything=True)
        if self.media is not None:
            # Whether the model sees is litellm's answer (its import is seconds of CPU): asked here,
            # off the event loop, rather than by the first photo on it.
            await asyncio.to_thread(lambda: self.media.vision)
        while True:
            await asyncio.sleep(self.settings.media_retry)
            await self.retry_waiting()

    async def retry_waiting(self, *, everything: bool = False) -> int:
        """Queue the waiting messages that are due again (bot.turn.attachments); returns how many."""
        if self.waiting is None:
            return 0
        entries = await self.waiting.due(sorted(self.cluster.receiving), everything=everything)
        for entry in entries:
            self.queues.put(entry)
        return len(entries)

    async def _process(self, entry: InboxEntry) -> None:
        """One accepted message: access, then command or turn; its answer goes to the outbox."""
        msg = entry.message
        started = time.perf_counter()  # turn latency is real time, whatever clock the tests move
        decision = await self.access.check(msg)
        if isinstance(decision, Refused):
            if decision.reply:
                await self._reply(entry, decision.reply)
            else:
                await asyncio.to_thread(self.inbox.close, entry.seq, "refused")
            self.observer.on_turn(msg.channel, "refused", time.perf_counter() - started)
            return
        outcome: list[TurnOutcome] = ["command"]  # _handle says "answered" or "failed" when the agent ran
        try:
            out = await self._handle(msg, decision, outcome, entry.seq)
        except StoreWriteError:
            raise
        except Exception:
            log.exception("turn failed in %s", msg.conversation_key)
            out = "Sorry, something went wrong on my side. Please try again."
            outcome[0] = "error"
        if out is None:
            await asyncio.to_thread(self.inbox.close, entry.seq,
                                    "cancelled" if outcome[0] == "cancelled" else "nothing to answer")
        elif isinstance(out, Waiting) and self.waiting is not None:
            line = await self.waiting.keep(entry, out)
            outcome[0] = "waiting"
            if line:  # through the outbox, not as the message's answer: the message stays waiting
                key = entry.message.conversation_key
                await self.outbox.aput(key, self._reply_for(entry.message, line), None)
                await self._flush(key)
        else:
            await self._reply(entry, out)
        self.observer.on_turn(msg.channel, outcome[0], time.perf_counter() - started)

    # --- one message -----------------------------------------------------------------------
    async def _handle(self, msg: Message, allowed: Allowed, outcome: list[TurnOutcome],
                      seq: int) -> str | Reply | Waiting | None:
        """The answer to one message `seq` (None: nothing to say); an agent turn sets outcome[0]."""
        # Voice notes, files and (for a model that sees) photos are read for the agent (bot/media).
        reads_media = self.media is not None and self.agent is not None and self.media.reads(msg)
        if msg.kind is not Kind.TEXT and not msg.text.strip() and not reads_media:
            return UNSUPPORTED_TEXT.get(msg.kind, UNSUPPORTED_TEXT[Kind.OTHER])
        if msg.kind is Kind.EDITED:
            return UNSUPPORTED_TEXT[Kind.EDITED]
        text = msg.text.strip()
        if not text and not reads_media:
            return None
        ctx = ToolContext(space_ids=allowed.space_ids, write_space=allowed.write_space,
                          public_space=self.settings.public_space, may_write_public=allowed.may_write_public,
                          kept_spaces=allowed.kept_spaces, private_chat=not msg.is_group,
                          speaker=allowed.identity.key, conversation=msg.conversation_key, origin=msg)
        if text.startswith("/") and not reads_media:  # a caption or a transcript is never a command
            out = await self.commands.handle(CommandContext(msg=msg, allowed=allowed, tools=ctx, gateway=self))
            if out is not None:
                return out
        if self.agent is None:
            return "No language model is configured, so I can only run commands. Try /help."
        channel = self.channels.get(msg.channel)
        # From here on the person sees "typing" and may stop the reply (the terminal's Ctrl-C): a
        # cancel that comes before the model is asked stops the turn as soon as the agent starts.
        cancel = self._cancels[msg.conversation_key] = asyncio.Event()
        # The reply is shown while it is written where the channel can (bot.delivery.drafts); the
        # finished reply still goes through the outbox and replaces what was shown.
        draft = self.drafts.start(channel, self._reply_for(msg, ""), seq=seq, conversation_key=msg.conversation_key,
                                  known_secrets=find_secrets(msg.text))
        result: TurnResult | None = None
        try:
            # Fetching and transcribing take time too: the person sees "typing" from here on.
            async with (channel.typing(msg) if channel is not None else nullcontext()):
                attached = Attached(text=msg.text_for_agent.strip())
                if reads_media:
                    marks = InboxReadMarks(self.inbox, seq)
                    read = await read_attachments(self.media, msg, channel, marks)
                    if not isinstance(read, Attached):
                        return read
                    attached = read
                session = await self.sessions.current(msg.conversation_key, allowed.write_space)
                history = await self.sessions.history(session, self.settings.history_tokens)
                req = TurnRequest(text=attached.text, turn_id=f"{msg.conversation_key}:{msg.message_id or id(msg)}:{msg.timestamp.timestamp()}",
                                  session_id=session.session_id, history=tuple(history), ctx=ctx, channel=msg.channel,
                                  speaker=msg.sender_name or None, images=attached.images, documents=attached.documents,
                                  cancel=cancel, on_text=draft.update if draft is not None else None,
                                  on_written=draft.written if draft is not None else None)
                result = await self.agent.run(req)
        finally:
            if self._cancels.get(msg.conversation_key) is cancel:
                del self._cancels[msg.conversation_key]
            if draft is not None:
                await (draft.drop() if result is not None and result.cancelled else draft.finish())
        outcome[0] = "cancelled" if result.cancelled else "failed" if result.failed else "answered"
        if self.on_turn is not None:
            self.on_turn(result)
        return None if result.cancelled else result.reply

    async def cancel_turn(self, channel: str, chat_id: str) -> bool:
        """Stop the reply being written in this chat (the person asked: the terminal's Ctrl-C).
        What they said is captured as usual; no answer is sent. False when no turn was in flight."""
        key = f"{channel}:{chat_id}"  # a chat without topics: the conversation key of its messages
        cancel = self._cancels.get(key)
        if cancel is None or cancel.is_set():
            return False
        cancel.set()
        return True

    async def new_session(self, msg: Message, allowed: Allowed) -> None:
        await self.sessions.current(msg.conversation_key, allowed.write_space, force_new=True)

    # --- outbound --------------------------------------------------------------------------
    def _reply_for(self, msg: Message, out: str | Reply) -> Reply:
        if isinstance(out, Reply):
            return out
        return Reply(channel=msg.channel, chat_id=msg.chat_id, text=out, thread_id=msg.thread_id,
                     reply_to=msg.message_id, recipient_id=msg.sender_id)

    async def _reply(self, entry: InboxEntry, out: str | Reply) -> None:
        """Write the answer to the outbox (the message becomes `replied`), then send what is due."""
        key = entry.message.conversation_key
        # The secrets of the message it answers are scrubbed from the reply's echo of them too.
        if not await self.outbox.aput(key, self._reply_for(entry.message, out), entry.seq, find_secrets(entry.message.text)):
            log.info("inbox: message %s in %s was answered by another process meanwhile; this reply is dropped", entry.seq, key)
            return
        await self._flush(key)

    async def _flush(self, key: str) -> None:
        """Send what is due in a conversation; a store that cannot record it now only delays it."""
        try:
            await self.outbox.flush(key)
        except StoreWriteError as exc:
            # The reply is durable; the outbox loop sends it once the store can record it.
            log.warning("outbox: delivery in %s waits for the store: %s", key, exc)

    async def _send_now(self, msg: Message, text: str) -> None:
        """A notice sent directly, not through the outbox (it says the outbox cannot be used)."""
        channel = self.channels.get(msg.channel)
        if channel is None:
            log.error("no channel %s to answer on", msg.channel)
            return
        try:
            await channel.send(self._reply_for(msg, text))
        except ChannelError as exc:
            log.error("delivery on %s failed: %s", msg.channel, exc)

    async def _held(self, entry: InboxEntry) -> None:
        """A full store holds this message's turn back: say so, once per message."""
        await self._tell_storage_down(entry.message, f"turn:{entry.seq}")

    async def _tell_storage_down(self, msg: Message, once_key: str) -> None:
        if once_key in self._told_storage_down:
            return
        if len(self._told_storage_down) > 10_000:
            self._told_storage_down.clear()
        self._told_storage_down.add(once_key)
        await self._send_now(msg, STORAGE_DOWN_TEXT)

    async def tell(self, channel: str, chat_id: str, recipient_id: str, text: str) -> None:
        """Send `text` to another chat than the one being answered (a person let in, a link to confirm)."""
        # Through the outbox like every reply: durable, retried, in order with that chat's answers.
        key = f"{channel}:{chat_id}"
        await self.outbox.aput(key, Reply(channel=channel, chat_id=chat_id, text=text, recipient_id=recipient_id), None)
        await self._flush(key)

    async def notify_owner(self, text: str) -> None:
        """Tell the owner something (e.g. WeChat needs a new login) on any channel that reaches them.

        Owners who wrote to the bot are tried first, then owners named in the config (a DM chat
        id equals the user id on Telegram and WeChat)."""
        known = [(i.channel, i.external_id) for i in await self.access.users() if i.role.value == "owner"]
        configured = [tuple(k.split(":", 1)) for k in self.access.config.owners if ":" in k]
        for channel, external_id in dict.fromkeys(known + configured):
            if channel not in self.channels:
                continue
            try:
                await self.channels[channel].send(Reply(channel=channel, chat_id=external_id, text=text,
                                                        recipient_id=external_id))
                return
            except ChannelError:
                continue
        log.error("could not reach the owner: %s", text)

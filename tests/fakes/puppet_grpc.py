"""A fake wechaty puppet service: the gRPC server a wechaty bot connects to, on 127.0.0.1.

It serves the subset of `wechaty.Puppet` (stubs from the `wechaty-grpc` package) that the python
wechaty SDK 0.10.7 calls: `Stop` then `Start` when it connects, the server-streamed `Event`
(EventResponse = an EventType plus a JSON payload), the payload look-ups a message event
triggers (`MessagePayload`, `ContactPayload`, `RoomPayload`) and `MessageSendText`. Any other RPC
answers UNIMPLEMENTED, so an SDK call we did not plan for fails loudly.

Tests push events (`login`, `push_message`) and read what the bot sent (`sent`, `wait_sent`).
Needs the `[wechaty]` extra (grpclib, wechaty-grpc); only tests/wechaty imports it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream
from wechaty_grpc.wechaty import puppet as pb

HOST = "127.0.0.1"

# The python SDK maps MessagePayloadResponse.type through the wechaty-puppet (TypeScript) enum,
# not the proto enum: a text message travels as 7 (TS `Text`) and the SDK turns it into
# MESSAGE_TYPE_TEXT. A real puppet service sends these numbers, so the fake does too.
WIRE_TYPE = {"text": 7, "image": 6, "audio": 2, "attachment": 1, "emoticon": 5, "video": 15}


@dataclass(frozen=True, slots=True)
class SentText:
    """One MessageSendText the bot made."""

    conversation_id: str
    text: str
    mention_ids: tuple[str, ...] = ()


@dataclass
class FakePuppetService:
    """The puppet's state: who exists, which messages the stream announced, what the bot sent."""

    contacts: dict[str, str] = field(default_factory=dict)  # id -> name
    rooms: dict[str, str] = field(default_factory=dict)  # id -> topic
    messages: dict[str, pb.MessagePayloadResponse] = field(default_factory=dict)
    sent: list[SentText] = field(default_factory=list)
    refuse_sends: bool = False  # answer MessageSendText with UNAVAILABLE
    calls: list[str] = field(default_factory=list)
    _events: asyncio.Queue[pb.EventResponse] = field(default_factory=asyncio.Queue)
    _sent_changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _stream_open: asyncio.Event = field(default_factory=asyncio.Event)
    _next_id: int = 0

    # -- driving the fake from a test ------------------------------------------------------

    def add_contact(self, contact_id: str, name: str) -> None:
        """Make a contact known to ContactPayload."""
        self.contacts[contact_id] = name

    def add_room(self, room_id: str, topic: str) -> None:
        """Make a room known to RoomPayload."""
        self.rooms[room_id] = topic

    def login(self, contact_id: str) -> None:
        """Announce that the puppet is logged in as contact_id (the bot's own id)."""
        self._emit(pb.EventType.EVENT_TYPE_LOGIN, {"contactId": contact_id})

    def push_message(
        self,
        from_id: str,
        text: str,
        *,
        room_id: str = "",
        to_id: str = "",
        mention_ids: tuple[str, ...] = (),
        kind: str = "text",
        timestamp: int = 0,
    ) -> str:
        """Store a message payload and announce it on the event stream; returns its id."""
        self._next_id += 1
        message_id = f"fake-msg-{id(self)}-{self._next_id}"
        self.messages[message_id] = pb.MessagePayloadResponse(
            id=message_id,
            text=text,
            timestamp=timestamp,
            type=WIRE_TYPE[kind],
            from_id=from_id,
            room_id=room_id,
            to_id=to_id,
            mention_ids=list(mention_ids),
        )
        self.announce(message_id)
        return message_id

    def announce(self, message_id: str) -> None:
        """Put a message event on the stream (again: real puppets sometimes repeat them)."""
        self._emit(pb.EventType.EVENT_TYPE_MESSAGE, {"messageId": message_id})

    async def wait_stream(self) -> None:
        """Wait until a client holds the event stream open."""
        await self._stream_open.wait()

    async def wait_sent(self, count: int) -> list[SentText]:
        """Wait until the bot has sent at least `count` texts; returns them all."""
        async with self._sent_changed:
            await self._sent_changed.wait_for(lambda: len(self.sent) >= count)
        return list(self.sent)

    def _emit(self, kind: pb.EventType, payload: dict[str, object]) -> None:
        self._events.put_nowait(pb.EventResponse(type=kind, payload=json.dumps(payload)))

    # -- gRPC handlers ---------------------------------------------------------------------

    async def _start(self, stream: Stream) -> None:
        await self._unary(stream, "Start", lambda _: pb.StartResponse())

    async def _stop(self, stream: Stream) -> None:
        await self._unary(stream, "Stop", lambda _: pb.StopResponse())

    async def _contact_payload(self, stream: Stream) -> None:
        def answer(request: pb.ContactPayloadRequest) -> pb.ContactPayloadResponse:
            return pb.ContactPayloadResponse(id=request.id, name=self.contacts.get(request.id, ""), friend=True)

        await self._unary(stream, "ContactPayload", answer)

    async def _room_payload(self, stream: Stream) -> None:
        def answer(request: pb.RoomPayloadRequest) -> pb.RoomPayloadResponse:
            return pb.RoomPayloadResponse(id=request.id, topic=self.rooms.get(request.id, ""))

        await self._unary(stream, "RoomPayload", answer)

    async def _message_payload(self, stream: Stream) -> None:
        await self._unary(stream, "MessagePayload", lambda request: self.messages[request.id])

    async def _message_send_text(self, stream: Stream) -> None:
        request: pb.MessageSendTextRequest = await stream.recv_message()
        self._record("MessageSendText")
        if self.refuse_sends:
            raise GRPCError(Status.UNAVAILABLE, "fake puppet refuses to send")
        self._next_id += 1
        sent_id = f"fake-sent-{id(self)}-{self._next_id}"
        # Kept like a real puppet would, so the SDK's say() can load what it sent.
        self.messages[sent_id] = pb.MessagePayloadResponse(
            id=sent_id, text=request.text, type=WIRE_TYPE["text"], to_id=request.conversation_id
        )
        await stream.send_message(pb.MessageSendTextResponse(id=sent_id))
        # Recorded after the answer so wait_sent() returns once the SDK call can complete.
        async with self._sent_changed:
            self.sent.append(SentText(request.conversation_id, request.text, tuple(request.mentonal_ids)))
            self._sent_changed.notify_all()

    async def _event(self, stream: Stream) -> None:
        await stream.recv_message()
        self._record("Event")
        self._stream_open.set()
        # Runs until the client goes away or the server closes (grpclib cancels the handler).
        while True:
            await stream.send_message(await self._events.get())

    async def _unary(self, stream: Stream, name: str, answer: Callable[[object], object]) -> None:
        request = await stream.recv_message()
        self._record(name)
        await stream.send_message(answer(request))

    def _record(self, name: str) -> None:
        self.calls.append(name)

    def __mapping__(self) -> dict[str, Handler]:
        """grpclib's handler table: route -> (coroutine, cardinality, request, reply types)."""
        unary = Cardinality.UNARY_UNARY

        def route(name: str, func: Callable[[Stream], Awaitable[None]], req: type, rep: type, card=unary) -> tuple:
            return f"/wechaty.Puppet/{name}", Handler(func, card, req, rep)

        return dict(
            [
                route("Start", self._start, pb.StartRequest, pb.StartResponse),
                route("Stop", self._stop, pb.StopRequest, pb.StopResponse),
                route("ContactPayload", self._contact_payload, pb.ContactPayloadRequest, pb.ContactPayloadResponse),
                route("RoomPayload", self._room_payload, pb.RoomPayloadRequest, pb.RoomPayloadResponse),
                route("MessagePayload", self._message_payload, pb.MessagePayloadRequest, pb.MessagePayloadResponse),
                route(
                    "MessageSendText", self._message_send_text, pb.MessageSendTextRequest, pb.MessageSendTextResponse
                ),
                route("Event", self._event, pb.EventRequest, pb.EventResponse, Cardinality.UNARY_STREAM),
            ]
        )


class FakePuppetServer:
    """`async with FakePuppetServer() as (service, end_point)`: the fake served on 127.0.0.1:<ephemeral>."""

    def __init__(self, service: FakePuppetService | None = None) -> None:
        self.service = service or FakePuppetService()
        self._server: Server | None = None

    async def __aenter__(self) -> tuple[FakePuppetService, str]:
        # Bind port 0 ourselves so the ephemeral port is known without reaching into grpclib.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
        self._server = Server([self.service])
        await self._server.start(sock=sock)
        return self.service, f"{HOST}:{port}"

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

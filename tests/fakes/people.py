"""Builders for the people and groups of access tests: DMs, group messages, the pairing code
quoted in a refusal, and an access desk wired like the composition root wires it."""

from __future__ import annotations

from dataclasses import dataclass

from bot.access.codes import CODE_ALPHABET
from bot.access.identities import Identity
from bot.access.policy import Access, Allowed, Refused
from bot.access.linking import Linking
from bot.message import Message
from bot.access.pairing import Pairing
from bot.settings import AccessConfig
from memory.store.connection import Store
from tests.fakes.clock import FakeClock


@dataclass(frozen=True, slots=True)
class Doors:
    """Access, pairing and linking over one store, wired as bot.app wires them."""

    access: Access
    pairing: Pairing
    linking: Linking


def make(store: Store, clock: FakeClock, **cfg) -> Doors:
    access = Access(store, AccessConfig(**cfg), clock=clock.now)
    pairing = Pairing(access)
    access.doorbell = pairing
    return Doors(access, pairing, Linking(access))


def dm(sender: str, *, channel: str = "telegram", name: str = "", text: str = "hi") -> Message:
    return Message(channel=channel, chat_id=sender, sender_id=sender, text=text,
                   timestamp=FakeClock().now(), sender_name=name)


def group(chat: str, sender: str, *, mention: bool = True, text: str = "hi", channel: str = "telegram") -> Message:
    return Message(channel=channel, chat_id=chat, sender_id=sender, text=text, timestamp=FakeClock().now(),
                   is_group=True, mentions_bot=mention)


def code_of(refused: Allowed | Refused) -> str:
    """The pairing code quoted in a refusal reply."""
    assert isinstance(refused, Refused) and refused.reply, refused
    words = [w.strip(".,()`") for w in refused.reply.split()]
    codes = [w for w in words if len(w) == 8 and all(c in CODE_ALPHABET for c in w)]
    assert codes, refused.reply
    return codes[0]


async def let_in(doors: Doors, msg: Message, by: Identity | None = None) -> Identity:
    code = code_of(await doors.access.check(msg))
    return (await doors.pairing.approve(code, by)).identity

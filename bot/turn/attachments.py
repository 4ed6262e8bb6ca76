"""The gateway's side of attachments: read them before the turn (bot/media), and what happens
to a message whose attachment cannot be read yet.

Such a message waits in the inbox (status `waiting`, words and attachment references kept): the
person is told once, in one line, and the gateway tries again at every start and every
`[media] retry_minutes`, up to `[media] max_attempts` failed tries; then it is closed and the
person told it was given up. A voice note that waits for a speech endpoint is not worn out by
tries: it waits until the owner configures `[speech] model` and restarts, then it is answered.
Why wait rather than drop: the person's words are in the audio; answering them late beats
losing them, and the platforms keep a file fetchable long enough (Telegram file ids do not
expire, WeChat media for 3 days).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.media.reader import NO_SPEECH_NOTE, Attached, MediaProblem, MediaReader
from bot.message import Message

__all__ = ["GIVEN_UP_TEXT", "NO_SPEECH_NOTE", "Waiting", "read_attachments"]

GIVEN_UP_TEXT = ("I tried {n} times to read the {what} you sent and could not, so I stopped trying. "
                 "Please send it again, or type what it said.")


@dataclass(frozen=True)
class Waiting:
    """The answer to a message that waits in the inbox: told `line` the first time only."""

    line: str
    note: str
    counts: bool  # a failed try (worn out after max_attempts), not waiting for the owner


async def read_attachments(reader: MediaReader, msg: Message, channel: object) -> Attached | Waiting | str:
    """The message with its attachments read, or why not: Waiting, or one final line."""
    try:
        return await reader.read(msg, channel)
    except MediaProblem as problem:
        if problem.wait:
            return Waiting(problem.line, problem.note, counts=problem.note != NO_SPEECH_NOTE)
        return problem.line

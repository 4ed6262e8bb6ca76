"""What a person does with their whole memory from a chat: take it with them (/export) and erase
it (/forget everything).

/export sends the memory as a file, JSONL or Markdown (the API's export formats), at most
`EXPORTS_PER_HOUR` times an hour per person: an export reads every row of the space.

/forget everything: the first message shows what would go (counts of facts, messages, tasks, skills, reminders) and a
code; the erase happens only when the same person, in the same chat, sends `/forget everything
CODE` within the time limit (bot.access.erasure.EraseCodes: good once, for that chat). In a group
it explains instead: a group's memory is the group's, and a person erases their own memory in a
direct chat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from bot.access import erasure
from bot.access.erase_views import GROUPS_STAY, counts_text
from bot.message import Document
from memory.engine import MemoryEngine
from memory.erase import EraseCounts
from memory.portable import markdown_head, markdown_line

EXPORTS_PER_HOUR = 3
EXPORT_USAGE = "Usage: /export, or /export markdown for a file to read (JSONL is the default, the file memgate imports)"
EXPORT_WAIT_TEXT = "You took your memory {n} times in the last hour; you can take it again in {left} minutes."

IN_GROUP_TEXT = ("In a group, what I remember belongs to the group, not to one member, so I cannot erase it for "
                 "you here. To erase everything I keep about you, send /forget everything to me in a direct chat.")
ASK_TEXT = ("This erases everything I keep about you: {counts}, our conversations, your API keys and your place "
            "here (I will not know you any more: you start over as a stranger, asking to be let in again if this "
            "bot asks that of newcomers). {groups} It cannot be undone.\n"
            "To go ahead, send /forget everything {code} within {minutes} minutes.")
DONE_TEXT = "Done: I erased {counts}, our conversations and your place here. I don't know you any more. {groups}"
NOTHING_WAITING_TEXT = ("That code is not waiting here (codes last {minutes} minutes, in the chat that asked). "
                        "Send /forget everything to get a new one.")


async def forget_everything(engine: MemoryEngine, codes: erasure.EraseCodes, conversation: str, speaker: str,
                            own_spaces: tuple[str, ...], is_group: bool, code: str) -> str:
    """The answer to `/forget everything [CODE]` from `speaker` in `conversation`."""
    if is_group:
        return IN_GROUP_TEXT
    if not code:
        planned = await erasure.plan(engine, own_spaces)
        issued = codes.issue(conversation, speaker, planned)
        return ASK_TEXT.format(counts=counts_text(planned), groups=GROUPS_STAY, code=issued, minutes=codes.minutes)
    waiting = codes.take(conversation, speaker, code)
    if waiting is None:
        return NOTHING_WAITING_TEXT.format(minutes=codes.minutes)
    done = await erasure.erase(engine, waiting, by=f"{speaker} (/forget everything)")
    return DONE_TEXT.format(counts=counts_text(done), groups=GROUPS_STAY)


def kept_text(kept: EraseCounts) -> str:
    """/memory's first line: how much is kept, and the two ways out."""
    def n(k: int, word: str) -> str:
        return f"{k} {word}{'' if k == 1 else 's'}"

    return (f"I keep {n(kept.messages, 'message')}, {n(kept.facts, 'fact')} and {n(kept.tasks, 'task')} about you "
            "(/export takes it all with you; /forget everything erases it).")


class Exports:
    """/export's files and its limit (EXPORTS_PER_HOUR per person, counted in this process)."""

    def __init__(self, engine: MemoryEngine, *, clock: Callable[[], datetime], per_hour: int = EXPORTS_PER_HOUR) -> None:
        self.engine, self.clock, self.per_hour = engine, clock, per_hour
        self._taken: dict[str, list[datetime]] = {}

    async def export(self, who: str, spaces: tuple[str, ...], arg: str) -> Document | str:
        """The person's memory as a file, or what to say instead (usage, or the wait)."""
        fmt = {"": "jsonl", "jsonl": "jsonl", "json": "jsonl", "md": "markdown", "markdown": "markdown"}.get(arg.lower())
        if fmt is None:
            return EXPORT_USAGE
        now, hour = self.clock(), timedelta(hours=1)
        self._taken = {k: ts for k, ts in ((k, [t for t in ts if now - t < hour]) for k, ts in self._taken.items()) if ts}
        taken = self._taken.setdefault(who, [])
        if len(taken) >= self.per_hour:
            left = max(1, -int(-(hour - (now - taken[0])).total_seconds() // 60))   # minutes, rounded up
            return EXPORT_WAIT_TEXT.format(n=len(taken), left=left)
        taken.append(now)
        rows = await asyncio.to_thread(lambda: list(self.engine.export_rows(list(spaces))))
        if fmt == "markdown":
            text = markdown_head(spaces[0]) + "".join(markdown_line(d) for d in rows)
            return Document(filename="memgate-export.md", data=text.encode("utf-8"), mime="text/markdown")
        import json

        data = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in rows).encode("utf-8")
        return Document(filename="memgate-export.jsonl", data=data, mime="application/jsonl")

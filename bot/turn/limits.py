"""Caps on one turn's text: how much of a message the model reads, how long a reply may be.

The person's message is always stored whole (memory embeds it in bounded pieces); these cuts
only bound what is sent to the LLM and back to the channel, and they say that they cut.
"""

from __future__ import annotations

RECALL_QUERY_CHARS = 1000  # recall searches with this much of the message (embedding sees one piece anyway)
MESSAGE_CUT_NOTE = "\n\n[… the message continues for {more} more characters, not shown here; it is stored in full]"
REPLY_CUT_NOTE = "\n\n[… reply cut at {limit} characters]"


def cut_at_boundary(text: str, limit: int) -> str:
    """The longest start of `text` within `limit` characters that ends at a paragraph, line,
    sentence or word boundary, if one lies in the last quarter of the window; else a hard cut.

    A code fence left open by the cut is closed, within the limit.
    """
    if len(text) <= limit:
        return text
    window = text[:limit]
    floor = limit * 3 // 4
    for sep in ("\n\n", "\n", ". ", "。", "! ", "? ", " "):
        at = window.rfind(sep, floor)
        if at >= 0:
            window = window[: at + len(sep)].rstrip()
            break
    if window.count("```") % 2:
        window = window[: limit - 4].rstrip() if len(window) > limit - 4 else window
        window += "\n```" if window.count("```") % 2 else ""
    return window


def cap_message(text: str, limit: int) -> str:
    """What the model reads of one inbound message: all of it, or its start and a note."""
    if len(text) <= limit:
        return text
    head = cut_at_boundary(text, limit)
    return head + MESSAGE_CUT_NOTE.format(more=len(text) - len(head))


def cap_reply(text: str, limit: int) -> str:
    """A reply within `limit` characters (note included), cut at a boundary with a note."""
    if len(text) <= limit:
        return text
    note = REPLY_CUT_NOTE.format(limit=limit)
    return cut_at_boundary(text, max(1, limit - len(note))) + note

"""Reading a LoCoMo-format file for the recall bench: its turns as captured turns (with times that
never stop a run), its evidence ids as the data writes them, its category names.

LoCoMo dates are free text ("1:56 pm on 8 May, 2023"); other files carry ISO times or Chinese
ones ("2024年04月01日 周一 08:25"). A turn time that cannot be read falls back to its session's
date, a session date that cannot be read to the day after the previous session: a set is
measured whole or not at all, never stopped by one odd date.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.ingest.raw import embed_text

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TURN_GAP = timedelta(seconds=30)
_ID = r"D\s*:?\s*(\d+)\s*:\s*(\d+)"
# "D12:3-D12:5" or "D12:3-5" (a range within one session), else a single id.
_EVIDENCE = re.compile(_ID + r"(?:\s*[-–~]\s*(?:D\s*:?\s*(\d+)\s*:\s*)?(\d+))?")
# 2024年04月01日 周一 08:25, 2024年4月1日 8:25, 2024年4月1日 (the weekday and the time optional).
_ZH_DATE = re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号](?:\D*?(\d{1,2})\s*[:：点]\s*(\d{1,2}))?")
_EN_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y", "%B %d, %Y")


_LINE = re.compile(r"^([^:：\n]{1,40})[:：]\s*(.*)$")
ASSISTANT_NAMES = frozenset(("assistant", "助手", "bot"))


def as_dialogue(question: str) -> tuple[list[tuple[str, str]], str]:
    """A question written as a running dialogue ("Name: text" lines, MADial's) as the product sees
    it: the history ((role, text), the lines named Assistant/助手 in the assistant's role) and the
    person's last message; any other question is a message with no history."""
    lines = [line for line in question.splitlines() if line.strip()]
    said = [_LINE.match(line) for line in lines]
    if len(lines) < 2 or not all(said):
        return [], question
    turns = [("assistant" if m.group(1).strip().lower() in ASSISTANT_NAMES else "user", m.group(2).strip()) for m in said]
    return turns[:-1], turns[-1][1]


def category_names(data: list[dict]) -> dict[int, str]:
    """The data's own category names (a sample's `category_names`), else LoCoMo's."""
    names: dict[int, str] = {}
    for conv in data:
        names |= {int(k): str(v) for k, v in (conv.get("category_names") or {}).items()}
    return names or dict(LOCOMO_CATEGORIES)


def parse_date(text: object) -> datetime | None:
    """LoCoMo's "1:56 pm on 8 May, 2023", an ISO date-time, or a Chinese "2024年04月01日 周一 08:25";
    None when it is none of these (the caller falls back)."""
    if not isinstance(text, str) or not text.strip():
        return None
    text = " ".join(text.split())
    for fmt in _EN_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError:
        pass
    m = _ZH_DATE.search(text)
    if m:
        y, mo, d, h, mi = (int(g) if g else 0 for g in m.groups())
        try:
            return datetime(y, mo, d, h, mi)
        except ValueError:
            return None
    return None


def normalise_evidence(raw: Sequence[str]) -> list[str]:
    """Every turn id the evidence names, in order, once: multi-id strings split ("D8:6; D9:17"),
    malformed ids repaired ("D:11:26", "D30:05"), ranges expanded ("D12:3-D12:5" is D12:3, D12:4,
    D12:5; "D12:3-5" too). Ids are kept whether or not a turn has them: unknown ids are misses.
    A range across sessions counts its two ends (the turns between are not knowable here)."""
    out: list[str] = []
    for item in raw:
        for a, b, c, d in _EVIDENCE.findall(str(item)):
            s, first = int(a), int(b)
            if d and (not c or int(c) == s) and first <= int(d) <= first + 200:
                ids = [f"D{s}:{i}" for i in range(first, int(d) + 1)]
            else:
                ids = [f"D{s}:{first}"] + ([f"D{int(c)}:{int(d)}"] if d and c else [])
            out.extend(i for i in ids if i not in out)
    return out


def session_numbers(c: dict) -> list[int]:
    """The numbers of a conversation's sessions that hold turns, in order."""
    return sorted(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k) and c[k])


def raw_turns(conv: dict) -> list[dict]:
    """A conversation's turns as the file has them, in the order `load_turns` reads them."""
    c = conv["conversation"]
    return [t for n in session_numbers(c) for t in c[f"session_{n}"]]


def turn_text(turn: dict) -> str:
    """A turn as it is captured: its text, and the caption of a photo it shares."""
    text = str(turn.get("text") or "")
    if turn.get("blip_caption"):
        text = f"{text} [shares a photo: {turn['blip_caption']}]"
    return text


def load_turns(conv: dict, space: str, assistant: str | None = None) -> tuple[list[CapturedTurn], datetime]:
    """Every message of a conversation as one captured turn (said by its speaker, in the user
    role: the bench's conversations are between people; the speaker named `assistant`, when
    given, in the assistant's role), and the time of the last one.

    A turn's time is its own `time` when it can be read, else its session's date + 30 s per
    turn; + 1 us per turn of the conversation, so no two turns share a time (MADial dates several
    notes on one day at 12:00: the queue would order them by random id)."""
    c = conv["conversation"]
    turns: list[CapturedTurn] = []
    last = previous = datetime(2000, 1, 1)
    for n in session_numbers(c):
        start = parse_date(c.get(f"session_{n}_date_time")) or previous + timedelta(days=1)
        previous = start
        for i, turn in enumerate(c[f"session_{n}"]):
            at = parse_date(turn.get("time")) or start + TURN_GAP * i
            at += timedelta(microseconds=len(turns))
            last = max(last, at)
            turns.append(CapturedTurn(space_id=space, session_id=f"{space}:S{n}", turn_id=turn["dia_id"], created_at=at,
                                      messages=(TurnMessage("assistant" if turn["speaker"] == assistant else "user",
                                                            turn_text(turn), speaker=turn["speaker"]),)))
    return turns, last


def expected_passages(turns: Sequence[CapturedTurn]) -> list[str]:
    """The texts the worker will embed (each message with the one before it in its session), so
    they can be embedded in large batches first; what this misses the worker embeds itself."""
    out, prev, session = [], None, None
    for t in sorted(turns, key=lambda t: t.created_at):
        if t.session_id != session:
            prev, session = None, t.session_id
        for m in t.messages:
            out.append(embed_text(m.text, m.speaker, prev.text if prev else None, (prev.speaker or prev.role) if prev else None))
            prev = m
    return out

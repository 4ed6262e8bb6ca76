"""A prompt never names a section the call does not show (issue 30 item 3: the ingest system prompt
told every call about NEEDS TITLE, POSSIBLE DUPLICATES and CURRENT TASK, which a short turn never
shows; SmolLM2 then answered {"titles": [1, 2, 3, 4]}).

Section names are read from the prompt constants themselves (a line of memory/prompts.py that
starts in capitals is a section header), so a new section or a new prompt is checked without
editing this test: every *_SYSTEM constant with a *_USER constant of the same stem may name only
the sections that user text has, one without may name none, and every ingest call (one turn or a
batch, each mix of sections a turn can need) names in its system prompt exactly the sections its
user text shows (KNOWN FACTS aside: its header line says what to do with it).
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime

import pytest

from memory import prompts
from memory.ingest import facts as F
from memory.ingest.capture import TurnMessage
from memory.ingest.turn_prompt import Ask, Shown, TurnView, render_batch, render_turn, system_for
from memory.tasks.boundary import TaskGist
from memory.tasks.rules import OpenTask

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
_HEADER = re.compile(r"^([A-Z]{2,}(?: [A-Z]{2,})*)(?=$|[ :(]|\.md)", re.M)
_CAPS = re.compile(r"[A-Z]{2,}(?: [A-Z]{2,})*")


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _texts(v)]
    return []


def constants() -> dict[str, list[str]]:
    return {name: _texts(getattr(prompts, name)) for name in dir(prompts) if name.isupper()}


def headers(text: str) -> set[str]:
    return set(_HEADER.findall(text))


_ALL = [t for texts in constants().values() for t in texts]
# A header that is also an answer's value ("NEW" in RECONCILE_USER and the verdict "NEW") is
# ambiguous in prose, so it is left out of the check.
SECTIONS = {h for t in _ALL for h in headers(t)} - {v for t in _ALL for v in re.findall(r'"([A-Z]{2,})"', t)}


def named(text: str) -> set[str]:
    """The sections `text` speaks of: capital runs that are section names, not a header line of
    `text` itself."""
    return {m for m in _CAPS.findall(text) if m in SECTIONS} - headers(text)


def test_the_section_names_are_found():
    assert {"MESSAGES", "NEEDS TITLE", "POSSIBLE DUPLICATES", "KNOWN FACTS", "CURRENT TASK", "TURN", "EXISTING",
            "NEW MESSAGE"} <= SECTIONS


@pytest.mark.parametrize("name", sorted(n for n in constants() if n.endswith("_SYSTEM")))
def test_a_system_prompt_names_only_the_sections_of_its_user_text(name):
    stem = name.removesuffix("_SYSTEM")
    users = [n for n in constants() if n.endswith("_USER") and stem.startswith(n.removesuffix("_USER"))]
    shown = {h for u in users for t in constants()[u] for h in headers(t)}
    assert named(getattr(prompts, name)) <= shown, f"{name} names a section its user text {users} lacks"


def _views() -> list[TurnView]:
    """A turn with each mix of what the ingest call can be asked: titles, duplicates, known facts,
    the task verdict; one or two user messages, or none."""
    gist = TaskGist("t1", OpenTask("s1", NOW, True), "Plan a weekend in Lisbon", ("user: and the trams?",))
    known = (F.Existing("f1", "The user's sister is called Maya", NOW, False),)
    out = []
    for title, near, facts, task, users in itertools.product((False, True), repeat=4 + 1):
        msgs = [Shown(1, TurnMessage("user" if users else "assistant", "My sister Maya visits in May."), False,
                      ("Maya visits in spring",) if near else ())]
        if users:
            msgs.append(Shown(2, TurnMessage("user", "She likes trams."), False))
        out.append(TurnView(NOW, tuple(msgs), (1,) if title else (), known if facts else (), gist if task else None))
    return out


@pytest.mark.parametrize("batch", [False, True])
def test_every_ingest_call_names_exactly_the_sections_it_shows(batch):
    views = _views()
    calls = ([render_batch(pair, NOW) for pair in itertools.combinations(views, 2)] if batch
             else [(system_for([Ask.of(v)]), render_turn(v, NOW)) for v in views])
    for system, user in calls:
        shown = headers(user)
        assert named(system) <= shown, f"system names {named(system)}, user shows {shown}:\n{system}\n---\n{user}"
        # and a section shown is asked for in the system prompt (KNOWN FACTS says what to do in place)
        unasked = shown - named(system) - {"MESSAGES", "TURN"}
        assert unasked <= {"KNOWN FACTS"}, f"{unasked} shown, never asked for"

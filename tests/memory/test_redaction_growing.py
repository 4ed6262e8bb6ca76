"""A reply shown while it is written (issue 30 item 5) shows no secret its finished text would
redact: at every point of the writing, `redact_growing` holds back what could still become one."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memory.redaction import find_secrets, redact, redact_growing
from tests.memory.test_redaction import SECRETS

PROSE = st.lists(st.sampled_from("Sure thing I will keep it here is what you asked for . , \n 好的 记住了".split(" ")),
                 max_size=8).map(" ".join)
QUOTED = [("my password is \"{}\" and that is all", "blue horse staple"),
          ("the vault's passphrase is '{}' ok", "red fox jumps"),
          ("you told me: {} (keep it safe)", "blue horse staple")]


def probes(secret: str) -> list[str]:
    """What must not be seen of a secret: each of its words of 4+ characters (the BEGIN/END lines
    of a private key are only its frame)."""
    return [w for w in re.split(r"\s+", secret) if len(w) >= 4 and "-----" not in w and w not in ("OPENSSH", "PRIVATE")]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([*SECRETS.values(), *QUOTED]), PROSE, PROSE)
@example(QUOTED[0], "", "")
@example(QUOTED[2], "", "")
def test_no_point_of_the_writing_shows_what_the_finished_text_hides(case, before, after):
    template, secret = case
    text = f"{before} {template.format(secret)} {after}".strip()
    known = [secret] if template.startswith("you told me") else []   # a secret of the message the reply answers
    finished = redact(text, known)
    hidden = [p for p in probes(secret) if p not in finished]
    assert hidden or not probes(secret), (text, finished)
    for cut in range(len(text) + 1):
        shown = redact_growing(text[:cut], known)
        for probe in hidden:
            assert probe not in shown, (text[:cut], shown)


@given(st.lists(st.sampled_from("The dog is named Rex and he likes long walks .\n".split(" ")), max_size=30)
       .map(" ".join))
def test_ordinary_text_is_shown_up_to_its_last_whole_word(text):
    shown = redact_growing(text)
    assert text.startswith(shown)
    words_done = text[: max(text.rfind(" "), text.rfind("\n")) + 1].rstrip()
    assert shown == words_done


def test_the_shown_text_grows_with_the_writing():
    text = "The dog is named Rex. He likes long walks by the sea."
    shown = [redact_growing(text[:i]) for i in range(len(text) + 1)]
    assert all(b.startswith(a) for a, b in zip(shown, shown[1:]))
    assert shown[-1] == "The dog is named Rex. He likes long walks by the"   # the last word waits for the end
    assert find_secrets(text) == []

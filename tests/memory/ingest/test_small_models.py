"""Memory calls that work with small models (issue 30 item 3).

Found with SmolLM2-135M on llama.cpp: `{"title": "1", ...}` cut at the token limit after 156 s,
`{"titles": [1, 2, 3, 4]}` (a schema error), "batched ingest of 14 turns failed (LLMError)" with
no reason; after 3 tries each turn went raw, at 90-170 s a try. The prompt spoke of NEEDS TITLE
without showing it and pasted a 3,900-character reply whole. Each is reproduced here with the
fake server answering as that model did, through the real worker, litellm and DuckDB.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import prompts
from memory.engine import MemoryEngine
from memory.errors import ModelTimedOut
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.ingest.settings import IngestSettings
from memory.ingest.turn_call import ask_turn
from memory.ingest.turn_prompt import TurnView
from memory.llm import LiteLLM, LLMSettings
from memory.llm_json import UnusableAnswer, close_cut
from tests.fakes import brain
from tests.fakes.llm_server import After, CutShort, FakeError

DOG = "My dog is called Brindlequix, he is a three-year-old whippet."
FACT = {"text": "The user's dog is called Brindlequix", "category": "people", "tags": ["dog"], "intent": "statement"}


def is_ingest(req: dict) -> bool:
    return req["messages"][0]["content"].startswith(prompts.TURN_SYSTEM[:40])


def ingest_requests(fake_llm) -> list[dict]:
    return [r for r in fake_llm.requests if is_ingest(r)]


def asked_schema(req: dict) -> dict:
    """The JSON schema the call asked the server to decode to."""
    fmt = req.get("response_format") or {}
    assert fmt.get("type") == "json_schema", fmt
    return fmt["json_schema"]["schema"]


def answers(*bad: object):
    """A responder: the ingest calls get `bad` answers in order, then brain's good ones."""
    left = list(bad)

    def respond(req: dict):
        if is_ingest(req) and left:
            return left.pop(0)
        return brain.respond(req)

    return respond


def queue_states(store) -> dict[str, int]:
    return dict(store.read(lambda c: c.execute("SELECT status, count(*) FROM ingest_queue GROUP BY status").fetchall()))


def fact_texts(store) -> list[str]:
    return store.read(lambda c: [r[0] for r in c.execute(
        "SELECT text FROM memories WHERE kind = 'fact' AND status = 'active' ORDER BY created_at").fetchall()])


@pytest.fixture
def engine(store, embedder, llm, clock, tmp_path):
    return MemoryEngine(store, embedder, llm, data_dir=tmp_path, clock=clock.now,
                        ingest_settings=IngestSettings(backoff_seconds=0.01))


async def say(engine, clock, *turns: tuple[str, str], drain: bool = True) -> None:
    for i, (user, reply) in enumerate(turns):
        await engine.capture(CapturedTurn("u:a", "s1", f"t{clock.now().timestamp()}-{i}", clock.now(),
                                          (TurnMessage("user", user), TurnMessage("assistant", reply))))
        clock.advance(seconds=30)
    if drain:
        await engine.worker.drain()


# --- the prompt: only what the turn needs --------------------------------------------------------

async def test_a_plain_turn_is_asked_for_its_facts_only_and_never_told_of_sections_it_does_not_see(engine, fake_llm, clock):
    # Found: the system prompt explained NEEDS TITLE, POSSIBLE DUPLICATES and CURRENT TASK to every
    # call, although a short turn shows none of them; the small model then invented "titles".
    fake_llm.responder = brain.respond
    await say(engine, clock, (DOG, "What a great name!"))
    (req,) = ingest_requests(fake_llm)
    system, user = req["messages"][0]["content"], req["messages"][1]["content"]
    for word in ("NEEDS TITLE", "titles", "POSSIBLE DUPLICATES", "dedup", "CURRENT TASK"):
        assert word not in system and word not in user
    schema = asked_schema(req)
    assert schema["required"] == ["facts"] and schema["additionalProperties"] is False
    facts = schema["properties"]["facts"]
    assert facts["maxItems"] == 5 and facts["items"]["properties"]["text"]["maxLength"] == 200  # bounded: no runaway
    assert req["max_tokens"] < 1024


async def test_a_long_message_is_asked_for_its_title_with_the_section_that_names_it(engine, fake_llm, clock):
    fake_llm.responder = brain.respond
    long = "I have been thinking about moving to Lisbon next spring because the weather is milder. " * 3
    await say(engine, clock, (long, "That sounds lovely."))
    (req,) = ingest_requests(fake_llm)
    system, user = req["messages"][0]["content"], req["messages"][1]["content"]
    assert "NEEDS TITLE: 1" in user and "NEEDS TITLE" in system
    assert asked_schema(req)["required"] == ["titles", "facts"]
    assert asked_schema(req)["properties"]["titles"]["required"] == ["1"]


async def test_the_reply_is_trimmed_in_the_prompt_and_the_persons_words_are_not(engine, fake_llm, clock):
    # Found: a 3,900-character reply pasted whole into the memory prompt.
    fake_llm.responder = brain.respond
    plan = "Day one: walk through Alfama and take the tram up the hill to the castle. " * 52
    question = "Can you suggest a weekend plan in Lisbon for me and my sister Maya? " * 4
    await say(engine, clock, (question.strip(), plan.strip()))
    (req,) = ingest_requests(fake_llm)
    user = req["messages"][1]["content"]
    assert len(plan) > 3800 and user.count("Day one") < 12
    assert question.strip() in user


# --- a bad answer is mended or narrowed, then the turn goes raw at once ----------------------------

async def test_an_answer_cut_at_the_token_limit_keeps_what_it_completed(engine, store, fake_llm, clock):
    good = json.dumps({"facts": [FACT, {"text": "The dog is a three-year-old whippet", "category": "people"}]})
    fake_llm.responder = answers(CutShort(good, at=len(good) - 25))
    await say(engine, clock, (DOG, "Nice!"))
    assert len(ingest_requests(fake_llm)) == 1         # mended, not asked again
    assert fact_texts(store) == [FACT["text"]]          # the complete fact kept, the cut one left out
    assert queue_states(store) == {"done": 1}


async def test_a_facts_list_cut_before_its_first_fact_is_not_taken_for_no_facts(engine, store, fake_llm, clock, caplog):
    # Closed after its last complete value, '{"facts": [' reads as "no facts": the turn would be
    # done with nothing learnt and nothing to extract later.
    fake_llm.responder = answers(CutShort('{"facts": ['))
    with caplog.at_level(logging.WARNING):
        await say(engine, clock, (DOG, "Nice!"))
    assert len(ingest_requests(fake_llm)) == 2
    assert fact_texts(store) and queue_states(store) == {"done": 1}
    assert "it had its first fact cut off (cut at the token limit)" in "\n".join(r.getMessage() for r in caplog.records)


async def test_the_cut_title_answer_is_narrowed_to_the_facts_alone(engine, store, fake_llm, clock, caplog):
    # Found: {"title": "1", ... cut at the token limit after 156 s; the turn went raw after 3 tries.
    long = DOG + " He loves running on the beach at Carcavelos every Sunday morning with my sister."
    fake_llm.responder = answers(CutShort('{"title": "1", "title_2": "Brindlequix the whip'))
    with caplog.at_level(logging.WARNING):
        await say(engine, clock, (long, "Lovely!"))
    first, second = ingest_requests(fake_llm)
    assert asked_schema(first)["required"] == ["titles", "facts"]
    assert asked_schema(second)["required"] == ["facts"]                    # fewer fields
    assert "NEEDS TITLE" not in second["messages"][1]["content"]
    assert fact_texts(store) and queue_states(store) == {"done": 1}
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "none of the fields asked (titles, facts); it gave title (cut at the token limit)" in said


async def test_titles_given_as_a_list_cost_the_titles_not_the_facts(engine, store, fake_llm, clock):
    # Found: {"titles": [1, 2, 3, 4]}: a schema error that cost the whole turn.
    long = DOG + " He loves running on the beach at Carcavelos every Sunday morning with my sister."
    fake_llm.responder = answers(json.dumps({"titles": [1, 2, 3, 4], "facts": [FACT]}))
    await say(engine, clock, (long, "Lovely!"))
    assert len(ingest_requests(fake_llm)) == 1
    assert fact_texts(store) == [FACT["text"]]
    title = store.read(lambda c: c.execute("SELECT title FROM memories WHERE role = 'user'").fetchone()[0])
    assert title.startswith("My dog is called Brindlequix")      # the text stands in for the title


async def test_a_turn_whose_answers_stay_unusable_goes_raw_at_once_saying_why(engine, store, fake_llm, clock, caplog):
    fake_llm.responder = answers(CutShort('{"facts": [{"text": "The user'), "Sure! Here are the facts: the dog is Rex.")
    with caplog.at_level(logging.WARNING):
        await say(engine, clock, (DOG, "Nice!"))
    assert len(ingest_requests(fake_llm)) == 2          # the turn, then once more; no retry minutes later
    assert queue_states(store) == {"raw": 1}
    attempts = store.read(lambda c: c.execute("SELECT attempts FROM ingest_queue").fetchone()[0])
    assert attempts == 1                                 # stored raw on its first attempt, not after backoffs
    pending = store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE needs_facts").fetchone()[0])
    assert pending == 1                                  # the user's message: its facts are extracted later
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "it gave malformed facts (facts[0]: Field required) (cut at the token limit)" in said
    assert "asked again: not JSON" in said
    assert "That answer was not valid" in ingest_requests(fake_llm)[1]["messages"][-1]["content"]


async def test_a_turn_without_a_user_message_falls_back_to_its_text_without_going_raw(engine, store, fake_llm, clock):
    fake_llm.responder = answers("not json")
    reminder = ("Reminder: your dentist appointment is tomorrow at 9:30 at the clinic on Rua Augusta, bring your "
                "insurance card and the X-ray pictures from March.")
    await engine.capture(CapturedTurn("u:a", "s1", "t-bot", clock.now(), (TurnMessage("assistant", reminder),)))
    await engine.worker.drain()
    assert len(ingest_requests(fake_llm)) == 1
    assert queue_states(store) == {"done": 1}


async def test_a_batch_that_gives_nothing_goes_turn_by_turn_says_why_and_the_next_batches_are_smaller(
        engine, store, fake_llm, clock, caplog):
    # Found: "batched ingest of 14 turns failed (LLMError)", no reason; then 3 tries a turn.
    fake_llm.responder = answers("I cannot do that for so many turns.")
    turns = [(f"My friend number {i} is called Name{i} and lives in Porto.", "Noted.") for i in range(3)]
    with caplog.at_level(logging.WARNING):
        await say(engine, clock, *turns)
    reqs = ingest_requests(fake_llm)
    assert "TURN 1" in reqs[0]["messages"][1]["content"] and len(reqs) == 4   # the batch, then each turn once
    assert asked_schema(reqs[0])["required"] == ["turns"]
    assert queue_states(store) == {"done": 3} and len(fact_texts(store)) == 3
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "batched ingest of 3 turns failed (UnusableAnswer: LLM answer for ingest unusable: not JSON" in said
    assert engine.worker.batch_tokens == engine.worker.settings.batch_tokens // 2


async def test_a_batch_part_that_lost_its_facts_is_asked_alone_and_the_others_are_kept(engine, store, fake_llm, clock):
    def good(n: int) -> dict:
        return {"facts": [{"text": f"The user's friend Name{n} lives in Porto", "category": "people"}]}

    fake_llm.responder = answers(json.dumps({"turns": {"1": good(0), "2": {"facts": "Name1"}, "3": good(2)}}))
    turns = [(f"My friend number {i} is called Name{i} and lives in Porto.", "Noted.") for i in range(3)]
    await say(engine, clock, *turns)
    assert len(ingest_requests(fake_llm)) == 2       # the batch, then turn 2 alone
    assert queue_states(store) == {"done": 3} and len(fact_texts(store)) == 3
    assert engine.worker.batch_tokens == engine.worker.settings.batch_tokens


# --- the server's side: schema-guided decoding where it is offered, a timeout not repeated ---------

async def test_a_server_that_refuses_the_schema_is_asked_for_a_json_object_from_then_on(fake_llm, clock):
    def respond(req: dict):
        if (req.get("response_format") or {}).get("type") == "json_schema":
            return FakeError(400, "response_format type json_schema is not supported")
        return brain.respond(req)

    fake_llm.responder = respond
    llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, retries=0, timeout=10))
    view = TurnView.plain((TurnMessage("user", DOG),), clock.now())
    for _ in range(2):
        answer = await ask_turn(llm, view, clock.now())
        assert answer.facts
    formats = [(r.get("response_format") or {}).get("type") for r in fake_llm.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert llm.refused_formats == {"json_schema"}


async def test_a_timed_out_memory_call_is_not_sent_again_as_it_was(fake_llm, clock):
    # Found: a memory call that timed out was sent twice more, unchanged (90-170 s a try).
    never = asyncio.Event()
    fake_llm.responder = answers(After(never.wait, "too late"))
    llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, retries=2, timeout=1,
                              backoff=0.01, retry_timeouts=False))
    long = DOG + " He loves running on the beach at Carcavelos every Sunday morning with my sister."
    answer = await ask_turn(llm, TurnView.plain((TurnMessage("user", long),), clock.now()), clock.now())
    first, second = ingest_requests(fake_llm)
    assert asked_schema(first)["required"] == ["titles", "facts"] and asked_schema(second)["required"] == ["facts"]
    assert answer.facts and not answer.titles


async def test_the_timeout_says_so(fake_llm):
    never = asyncio.Event()
    fake_llm.responder = lambda req: After(never.wait, "too late")
    llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, retries=2, timeout=1,
                              retry_timeouts=False))
    with pytest.raises(ModelTimedOut, match=r"timed out after 1 s \(max_tokens 64\)"):
        await llm.complete([{"role": "user", "content": "hi"}], purpose="ingest", max_tokens=64)
    assert fake_llm.calls == 1


async def test_the_entry_point_says_why_when_it_gives_up(fake_llm, clock):
    fake_llm.responder = lambda req: '{"titles": [1, 2, 3, 4]}'
    llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, retries=0, timeout=10))
    with pytest.raises(UnusableAnswer) as got:
        await ask_turn(llm, TurnView.plain((TurnMessage("user", DOG),), clock.now()), clock.now())
    assert got.value.reason.startswith("none of the fields asked (facts); it gave titles")


# --- mending a cut answer, as a property -----------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)


def _within(got: object, whole: object) -> bool:
    """`got` is `whole` with values left out at its end: no value changed, none half there."""
    if isinstance(whole, dict):
        return isinstance(got, dict) and all(k in whole and _within(v, whole[k]) for k, v in got.items())
    if isinstance(whole, list):
        return (isinstance(got, list) and len(got) <= len(whole)
                and all(g == w for g, w in zip(got[:-1], whole)) and all(_within(g, w) for g, w in zip(got[-1:], whole[len(got) - 1:])))
    return got == whole


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.lists(json_values, max_size=4) | st.dictionaries(st.text(max_size=5), json_values, max_size=4),
       data=st.data())
def test_a_cut_answer_closes_to_a_part_of_the_whole_and_the_whole_to_itself(value, data):
    text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
    assert close_cut(text) == value
    cut = data.draw(st.integers(min_value=1, max_value=len(text)))
    try:
        got = close_cut(text[:cut])
    except ValueError:
        return
    assert _within(got, value)

"""Telegram end to end: the real python-telegram-bot client (TelegramAdapter) against the fake
Bot API server, with the real gateway, access control, commands, agent and DuckDB, and the fake
LLM answering as `brain`. Pairing, groups, long and failing deliveries, isolation and linking,
and the memory commands, each seen the way a person on Telegram sees them."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.access.codes import CODE_ALPHABET
from bot.access.pairing import APPROVED_TEXT
from bot.app import App, build_app
from bot.config import load_settings
from memory.text import MEMORY_CLOSE, MEMORY_OPEN
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import Script, ToolCall
from tests.fakes.telegram_api import FakeTelegram, utf16_len

OWNER = 1
GROUP = -1001000000001
OTHER_GROUP = -1001000000002
PAIRING_CODE = re.compile(r"pairing code is ([A-Z0-9]+)")
LINK_CODE = re.compile(r"link code: ([A-Z0-9]+)")


def is_reply_request(req: dict) -> bool:
    """A request of the agent's own turn (not ingest, tasks or skills)."""
    return req["messages"][0]["content"].startswith("You are memgate")


class Bot:
    """The running app seen from Telegram: say things as a user, read what the bot answered."""

    def __init__(self, app: App, tg: FakeTelegram, fake_llm: Any, answers: dict[str, Script]) -> None:
        self.app = app
        self.tg = tg
        self.llm = fake_llm
        # Reply-turn answers by a phrase of the user's message; everything else is `brain`.
        self.answers = answers

    def say(self, user: int, text: str, **kwargs: Any) -> dict[str, Any]:
        """A DM from `user` (or, with chat_id/chat_type, a message elsewhere)."""
        return self.tg.inject_message(user, text, first_name=f"User{user}", **kwargs)

    def say_in_group(self, user: int, text: str, group: int = GROUP, **kwargs: Any) -> dict[str, Any]:
        return self.tg.inject_group_message(user, text, chat_id=group, first_name=f"User{user}", **kwargs)

    def answers_to(self, msg: dict[str, Any]) -> list[dict[str, Any]]:
        """What the bot sent that quotes `msg` (the first part of each reply does)."""
        return [s for s in self.tg.sent if s["chat_id"] == msg["chat"]["id"]
                and (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"]]

    async def answer(self, msg: dict[str, Any], timeout: float = 30.0) -> str:
        """Wait for the (first part of the) bot's answer to `msg`; its visible text."""
        await self.tg.wait_until(lambda: bool(self.answers_to(msg)), timeout)
        return self.answers_to(msg)[0]["visible_text"]

    async def ask(self, user: int, text: str, **kwargs: Any) -> str:
        return await self.answer(self.say(user, text, **kwargs))

    def turn_requests(self, text: str) -> list[dict]:
        """The agent's LLM requests for the turn whose user message is `text` (tool rounds too)."""
        out = []
        for req in self.llm.requests:
            if not is_reply_request(req):
                continue
            users = [m for m in req["messages"] if m["role"] == "user"]
            if users and users[-1]["content"] == text:
                out.append(req)
        return out

    def memory_block(self, text: str) -> str:
        """The recall block the agent was given for the turn `text` ('' when nothing was found)."""
        system = self.turn_requests(text)[0]["messages"][0]["content"]
        if MEMORY_OPEN not in system:
            return ""
        return system.split(MEMORY_OPEN, 1)[1].split(MEMORY_CLOSE, 1)[0]

    def tool_results(self, text: str) -> list[str]:
        """The tool messages the agent got back during the turn `text`."""
        last = self.turn_requests(text)[-1]
        return [m["content"] for m in last["messages"] if m["role"] == "tool"]


@pytest.fixture
def env(tmp_path, fake_llm) -> Callable[..., dict[str, str]]:
    empty = tmp_path / "memgate.toml"  # never a developer's own config file
    empty.write_text("")

    def make(**extra: str) -> dict[str, str]:
        base = {"MEMGATE_CONFIG": str(empty), "MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64",
                "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
                "MEMGATE_ACCESS_OWNERS": f"telegram:{OWNER}"}
        base.update(extra)
        return base
    return make


@pytest.fixture
def running(env, fake_llm, clock, embedder) -> Callable[..., Any]:
    """`async with running(**env) as bot:` a whole memgate on the fake Telegram."""

    @asynccontextmanager
    async def run(*more_channels: Any, **extra_env: str) -> AsyncIterator[Bot]:
        answers: dict[str, Script] = {}

        def respond(req: dict) -> Script:
            last = req["messages"][-1]
            if is_reply_request(req) and last["role"] == "user":
                for phrase, answer in answers.items():
                    if phrase in last["content"]:
                        return answer
            return brain.respond(req)

        fake_llm.responder = respond
        async with FakeTelegram() as tg:
            adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=5, typing_interval=0.5,
                                      retry_delay=0.01)
            settings = load_settings(None, env=env(**extra_env))
            app = build_app(settings, channels=[adapter, *more_channels], clock=clock.now, embedder=embedder)
            async with app:
                yield Bot(app, tg, fake_llm, answers)
                # Settle ingestion before leaving, so stopping the worker has nothing to wait for.
                await app.gateway.idle()
                await app.engine.worker.drain()

    return run


# -- pairing --------------------------------------------------------------------------------


async def test_pairing_owner_approves_in_chat_then_the_agent_answers(running):
    async with running() as bot:
        first = await bot.ask(2, "hello, who are you?")
        code = PAIRING_CODE.search(first).group(1)
        assert len(code) == 8 and set(code) <= set(CODE_ALPHABET) and not set(code) & set("0O1I")
        # The stranger's words went nowhere near the model.
        assert not bot.turn_requests("hello, who are you?")
        # Asking again while waiting gives the same code, not a new request.
        assert code in await bot.ask(2, "hello?")

        approved = await bot.ask(OWNER, f"/approve {code}")
        assert approved.startswith("Approved User2 (telegram:2) as user")

        assert await bot.ask(2, "what can you do?") == "You said: what can you do?"
        assert bot.turn_requests("what can you do?")


async def test_pairing_expired_code_is_refused_and_a_newcomer_is_never_locked_out(running, clock):
    async with running(MEMGATE_ACCESS_MAX_PENDING="3") as bot:
        late = PAIRING_CODE.search(await bot.ask(2, "hi")).group(1)
        clock.advance(minutes=61)
        refused = await bot.ask(OWNER, f"/approve {late}")
        assert "has expired" in refused
        # Still a stranger: a fresh code, no agent.
        again = await bot.ask(2, "hi again")
        fresh = PAIRING_CODE.search(again).group(1)
        assert fresh != late
        assert not bot.turn_requests("hi again")

        # Three waiting requests (2's fresh one, 3 and 4): a fourth stranger still gets a code, and
        # the oldest waiting request (2's) makes room.
        for user in (3, 4):
            clock.advance(seconds=1)
            assert PAIRING_CODE.search(await bot.ask(user, "let me in"))
        clock.advance(seconds=1)
        newcomer = PAIRING_CODE.search(await bot.ask(5, "let me in")).group(1)
        assert "expired" in await bot.ask(OWNER, f"/approve {fresh}")
        assert "Approved User5" in await bot.ask(OWNER, f"/approve {newcomer}")
        # The newcomer is told, in their own chat, that they were let in.
        assert any(s["chat_id"] == 5 and s["visible_text"] == APPROVED_TEXT for s in bot.tg.sent)
        pending = await bot.ask(OWNER, "/approve")
        assert pending.count("(telegram)") == 2


# -- groups ---------------------------------------------------------------------------------


async def test_group_answers_only_when_addressed(running):
    async with running(MEMGATE_ACCESS_GROUPS=f"telegram:{GROUP}") as bot:
        quiet = bot.say_in_group(21, "just chatting among ourselves")
        mentioned = bot.say_in_group(21, bot.tg.mention("what is the plan?"))
        # Updates are handled in order: once the mention is answered, the quiet one had its turn.
        assert await bot.answer(mentioned) == "You said: what is the plan?"
        assert bot.answers_to(quiet) == []
        assert not bot.turn_requests("just chatting among ourselves")

        bot_msg = bot.answers_to(mentioned)[0]["message_id"]
        followup = bot.say_in_group(22, "and tomorrow?", reply_to_message=bot_msg)
        assert (await bot.answer(followup)).endswith("You said: and tomorrow?")

        helped = await bot.answer(bot.say_in_group(23, "/help"))
        assert helped.startswith("I remember what you tell me") and "/remember" in helped

        # A group that is not on the allowlist says so when addressed, and stays silent otherwise.
        ignored = bot.say_in_group(21, "anyone here?", group=OTHER_GROUP)
        refused = await bot.answer(bot.say_in_group(21, bot.tg.mention("hello"), group=OTHER_GROUP))
        assert refused == "Sorry, I'm not enabled in this group."
        assert bot.answers_to(ignored) == []
        assert {s["chat_id"] for s in bot.tg.sent} == {GROUP, OTHER_GROUP}


# -- delivery -------------------------------------------------------------------------------


def long_reply() -> tuple[str, list[str], list[str]]:
    """A ~10,000-character markdown reply: numbered prose paragraphs and code blocks, one of them
    longer than a Telegram message. Returns (text, prose markers, code markers) in order."""
    blocks: list[str] = []
    prose: list[str] = []
    code: list[str] = []
    n_code = 0
    for section in range(6):
        for _ in range(3):
            marker = f"P{len(prose):03d}"
            prose.append(marker)
            blocks.append(f"{marker} This paragraph explains step {len(prose)} of the plan in plain words. "
                          "It has a second sentence, so a cut has sentences to choose from.")
        lines = 60 if section == 2 else 12  # section 2 holds a block longer than 4096
        body = []
        for _ in range(lines):
            marker = f"C{n_code:03d}"
            n_code += 1
            code.append(marker)
            body.append(f"result_{marker} = compute(x, y)  # {marker} keeps the value <here> & there")
        blocks.append("```python\n" + "\n".join(body) + "\n```")
    text = "\n\n".join(blocks)
    while len(text) < 10_000:
        marker = f"P{len(prose):03d}"
        prose.append(marker)
        text += f"\n\n{marker} One more closing paragraph, to reach the length we want to test."
    return text, prose, code


async def test_long_reply_arrives_in_ordered_parts_with_balanced_code(running):
    text, prose, code = long_reply()
    assert len(text) >= 10_000
    async with running(MEMGATE_ACCESS_DM_POLICY="open") as bot:
        bot.answers["the long answer"] = text
        asked = bot.say(31, "give me the long answer")
        await bot.answer(asked)
        # Same conversation, FIFO: once this is answered, every part of the long one is out.
        await bot.ask(31, "thanks")
        sent = [s for s in bot.tg.sent if s["chat_id"] == 31]
        first = sent.index(bot.answers_to(asked)[0])
        parts = sent[first:-1]
        assert len(parts) >= 3
        assert all(utf16_len(p["visible_text"]) <= 4096 for p in parts)
        assert all(p.get("parse_mode") == "HTML" for p in parts)
        in_code: list[str] = []
        in_prose: list[str] = []
        for part in parts:
            html = part["text"]
            # Every fence opened in a part is closed in it (the fake refused bad nesting already).
            assert html.count("<pre>") + html.count("<pre ") == html.count("</pre>")
            blocks = re.findall(r"<pre>(.*?)</pre>", html, flags=re.S)
            outside = re.sub(r"<pre>.*?</pre>", "", html, flags=re.S)
            in_code += [m for b in blocks for m in re.findall(r"# (C\d{3}) keeps", b)]
            in_prose += re.findall(r"\bP\d{3}\b", outside)
            assert not re.search(r"C\d{3}", outside)  # no code line escaped its block
        # Nothing lost, nothing repeated, in order; code stayed code and prose stayed prose.
        assert in_code == code
        assert in_prose == prose
        assert any("&lt;here&gt; &amp; there" in p["text"] for p in parts)


async def test_parse_error_falls_back_to_plain_text(running):
    async with running(MEMGATE_ACCESS_DM_POLICY="open") as bot:
        bot.answers["format it"] = "Here is **bold** news and `code`."
        bot.tg.fail_parse_next(1)
        asked = bot.say(32, "format it please")
        assert await bot.answer(asked) == "Here is bold news and code."
        assert bot.answers_to(asked)[0].get("parse_mode") is None
        refused = [r for r in bot.tg.rejected if r["chat_id"] == 32]
        assert len(refused) == 1 and refused[0]["parse_mode"] == "HTML" and "<b>bold</b>" in refused[0]["text"]


async def test_rate_limit_delays_but_loses_nothing(running):
    async with running(MEMGATE_ACCESS_DM_POLICY="open") as bot:
        await bot.ask(33, "warm up")
        bot.tg.rate_limit_next(1, retry_after=1)
        msgs = [bot.say(33, f"number {i}") for i in range(3)]
        answers = [await bot.answer(m) for m in msgs]
        assert [a.split("You said: ")[-1] for a in answers] == [f"number {i}" for i in range(3)]
        assert [r["text"] for r in bot.tg.rejected] == [bot.answers_to(msgs[0])[0]["text"]]
        texts = [s["visible_text"] for s in bot.tg.sent if s["chat_id"] == 33]
        assert texts == ["You said: warm up", *answers]  # each once, in order


async def test_a_multi_part_reply_survives_429s_past_the_clients_retries(running):
    """Found: a reply meeting four 429s in a row was dropped ("still rate limited after
    retries") and the remaining parts of a multi-part reply went with it. The client library
    tries 4 times; the outbox keeps the part and retries no sooner than retry_after."""
    paragraphs = [f"Paragraph {i}: " + "words " * 500 for i in range(3)]
    async with running(MEMGATE_ACCESS_DM_POLICY="open", MEMGATE_DELIVERY_RETRY_BASE_SECONDS="0.2") as bot:
        await bot.ask(34, "warm up")
        bot.answers["the long story"] = "\n\n".join(paragraphs)
        bot.tg.rate_limit_next(6, retry_after=1)  # 4 for the client's tries, 2 more for the outbox's retry
        asked = bot.say(34, "tell me the long story")
        after = bot.say(34, "and then?")           # queued behind it: must not overtake any part
        await bot.answer(after, timeout=60)
        sent = [s["visible_text"] for s in bot.tg.sent if s["chat_id"] == 34]
        assert len(bot.tg.rejected) == 6
        story = sent[1:-1]
        assert [p.split(":")[0] for p in story] == ["Paragraph 0", "Paragraph 1", "Paragraph 2"]  # each once, in order
        assert sent[0] == "You said: warm up" and sent[-1].endswith("You said: and then?")
        assert bot.answers_to(asked)[0]["visible_text"] == story[0]
        assert bot.app.gateway.outbox.stats.retried >= 1 and bot.app.gateway.outbox.stats.failed_permanent == 0


# -- isolation and linking ------------------------------------------------------------------


async def test_two_telegram_users_never_see_each_others_memories(running):
    async with running(MEMGATE_ACCESS_DM_POLICY="open") as bot:
        secret = remembered_id(await bot.ask(41, "/remember my secret project is called Bluebird"))
        assert "Remembered" in await bot.ask(42, "/remember I collect old stamps")
        question = "tell me about the Bluebird project"
        search = "search my memory for the Bluebird project"
        bot.answers[search] = ToolCall("memory_search", {"query": "secret project Bluebird", "scope": "all"})

        # 42's own words (the questions) become 42's memories: the secret is the fact and its id.
        def leaks(text: str) -> bool:
            return "called Bluebird" in text or secret in text

        await bot.ask(41, question)
        assert leaks(bot.memory_block(question))  # the owner of the memory gets it in the recall block
        await bot.ask(42, question)
        systems = [r["messages"][0]["content"] for r in bot.turn_requests(question)]
        assert len(systems) == 2 and not leaks(systems[1])

        await bot.ask(41, search)
        assert any(leaks(t) for t in bot.tool_results(search))
        await bot.ask(42, search)
        tool_texts = bot.tool_results(search)
        assert tool_texts and not any(leaks(t) for t in tool_texts)

        assert not leaks(await bot.ask(42, "/memory secret project"))
        assert not leaks(await bot.ask(42, "/memory"))
        assert "stamps" not in await bot.ask(41, "/memory stamps")
        assert leaks(await bot.ask(41, "/memory secret project"))


async def test_link_shares_one_memory_after_confirmation_and_keeps_the_joiners_own(running):
    console = RecordingChannel("console")
    async with running(console, MEMGATE_ACCESS_DM_POLICY="open") as bot:
        await bot.ask(51, "/remember my cat is called Miso")
        await bot.ask(52, "/remember my bike is a red Brompton")
        assert "Miso" not in await bot.ask(52, "/memory")

        code = LINK_CODE.search(await bot.ask(51, "/link")).group(1)
        assert "confirm" in await bot.ask(52, f"/link {code}")
        # 51 is asked in its own chat, shown which account asks.
        await bot.tg.wait_until(lambda: any(s["chat_id"] == 51 and "/link yes" in s["visible_text"] for s in bot.tg.sent))
        # Both accounts confirm: the owner's yes alone shares nothing.
        assert "Linked" not in await bot.ask(51, "/link yes")
        assert "Miso" not in await bot.ask(52, "/memory")
        assert "Linked" in await bot.ask(52, "/link yes")
        # 52 joined 51's memory; 52's earlier memory stayed 52's own.
        joined = await bot.ask(52, "/memory")
        assert "Miso" in joined and "red Brompton" in joined
        owner_side = await bot.ask(51, "/memory")
        assert "Miso" in owner_side and "red Brompton" not in owner_side
        # The agent recalls the shared memory too.
        await bot.ask(52, "what is my cat called?")
        assert "Miso" in bot.memory_block("what is my cat called?")
        # A used code is spent.
        assert "no open link code" in await bot.ask(53, f"/link {code}")

        code = LINK_CODE.search(await bot.ask(52, "/link")).group(1)
        await console.say("me", f"/link {code}")
        await console.wait_for(1)
        assert "confirm" in console.texts()[-1]
        assert "Linked" not in await bot.ask(52, "/link yes")
        await console.wait_for(2)   # told that 52 confirmed, and how to answer
        assert "/link yes" in console.texts()[-1]
        await console.say("me", "/link yes")
        await console.wait_for(3)
        assert console.texts()[-1].startswith("Linked")
        await console.say("me", "/memory")
        await console.wait_for(4)
        assert "Miso" in console.texts()[-1] and "red Brompton" not in console.texts()[-1]
        await console.say("me", "/remember my phone is a Fairphone")
        await console.wait_for(5)
        assert "Fairphone" in await bot.ask(51, "/memory")


# -- memory commands ------------------------------------------------------------------------


async def export_of(bot: Bot, user: int) -> list[dict]:
    before = len([s for s in bot.tg.sent if s["method"] == "sendDocument"])
    bot.say(user, "/export")
    await bot.tg.wait_until(lambda: len([s for s in bot.tg.sent if s["method"] == "sendDocument"]) > before)
    doc = [s for s in bot.tg.sent if s["method"] == "sendDocument"][-1]
    assert doc["chat_id"] == user and doc["filename"].endswith(".jsonl")
    return [json.loads(line) for line in doc["data"].decode().splitlines()]


def remembered_id(answer: str) -> str:
    return re.search(r"Remembered \[([^\]]+)\]", answer).group(1)


async def test_remember_forget_and_export_do_what_they_say(running):
    async with running(MEMGATE_ACCESS_DM_POLICY="open") as bot:
        ids = {}
        for text in ("I drink green tea every morning", "I drink jasmine tea after lunch",
                     "my dog is called Rex", "my sister lives in Lyon"):
            ids[text] = remembered_id(await bot.ask(61, f"/remember {text}"))
        other = remembered_id(await bot.ask(62, "/remember I drink black tea at night"))
        listing = await bot.ask(61, "/memory")
        assert listing.count("📌") == 4 and "black tea" not in listing

        # A query matching several memories asks first and forgets nothing yet.
        ask = await bot.ask(61, "/forget drink tea")
        assert ask.startswith("I would forget these memories")
        listed = set(re.findall(r"\[([^\]]+)\]", ask))
        assert listed >= {ids["I drink green tea every morning"], ids["I drink jasmine tea after lunch"]}
        assert other not in listed
        assert len(await export_of(bot, 61)) == 4
        forgot = await bot.ask(61, "/forget yes")
        assert forgot == f"Forgot {len(listed)} memories."
        assert (await bot.ask(61, f"/forget {ids['my sister lives in Lyon']}")).startswith("Forgot [")
        # Someone else's memory cannot be forgotten by id.
        assert await bot.ask(61, f"/forget {other}") == f"[{other}] is not one of your memories."

        rows = await export_of(bot, 61)
        live = {t for t, i in ids.items() if i not in listed and t != "my sister lives in Lyon"}
        assert {r["text"] for r in rows} == live
        assert {r["id"] for r in rows} == {ids[t] for t in live}
        assert all(r["pinned"] and r["status"] == "active" for r in rows)
        assert len({r["space_id"] for r in rows}) == 1

        theirs = await export_of(bot, 62)
        assert [(r["id"], r["text"]) for r in theirs] == [(other, "I drink black tea at night")]


# -- smaller channel findings (issue 10, section 9) ------------------------------------------


async def test_group_command_for_another_bot_is_not_answered(running):
    async with running(MEMGATE_ACCESS_GROUPS=f"telegram:{GROUP}") as bot:
        other = bot.say_in_group(21, "/help@other_bot")
        ours = bot.say_in_group(21, f"/help@{bot.tg.bot_username}")
        # Updates are handled in order: once ours is answered, the other bot's had its turn.
        assert (await bot.answer(ours)).startswith("I remember what you tell me")
        assert bot.answers_to(other) == []


class _Terminal(RecordingChannel):
    """A channel answering /quit itself, as the terminal does."""

    def local_commands(self):
        return [("quit", "/quit: leave the chat")]


async def test_command_menu_lists_the_commands_everyone_may_use(running):
    async with running(_Terminal("console")) as bot:
        assert "/quit" in await bot.ask(OWNER, "/help")     # in /help ...
        menu = {c["command"]: c["description"] for c in bot.tg.commands}
    assert {"help", "memory", "remember", "forget", "export", "new"} <= set(menu)
    assert menu["help"] == "this list"
    assert not {"approve", "deny", "users", "role", "block", "start"} & set(menu)  # admin-only and hidden ones
    # Commands wired after the channels were added (tasks and skills, issue 34) are on it too;
    # the terminal's own (/quit, answered by the terminal alone) are not.
    assert {"tasks", "skills", "skill", "remind", "reminders"} <= set(menu)
    assert "quit" not in menu                            # ... not on Telegram's menu


async def test_photo_caption_tells_the_agent_a_picture_came_with_it(running):
    async with running() as bot:
        answer = await bot.answer(bot.tg.inject_message(OWNER, photo=True, caption="what breed is this?",
                                                        first_name=f"User{OWNER}"))
        assert bot.turn_requests("[photo] what breed is this?")
        assert answer.endswith("You said: [photo] what breed is this?")


# -- /pulse ---------------------------------------------------------------------------------


async def test_pulse_is_a_chart_on_telegram_and_text_on_the_console(running, clock):
    import io
    import os

    import png

    from adapters.console import ConsoleAdapter
    from bot.turn.views.pulse import PALETTE

    read_fd, write_fd = os.pipe()
    console_in, console_out = os.fdopen(read_fd, "r"), io.StringIO()
    console = ConsoleAdapter("me", stdin=console_in, stdout=console_out)
    async with running(console) as bot:
        await bot.ask(OWNER, "/whoami")
        owner = next(u for u in await bot.app.access.users() if u.key == f"telegram:{OWNER}")
        engine = bot.app.engine
        for text, category, days_ago in (("I work at the harbour office.", "work", 3),
                                         ("My standup is at nine.", "work", 0),
                                         ("Our daughter is called Mia.", "family", 0)):
            clock.set(datetime(2026, 3, 10, 12, tzinfo=UTC) - timedelta(days=days_ago))
            await engine.remember(text, owner.space_id, category=category)
        assert "Usage: /pulse" in await bot.ask(OWNER, "/pulse 90d")

        msg = bot.say(OWNER, "/pulse 7d")
        caption = await bot.answer(msg)
        photo = [s for s in bot.answers_to(msg) if s["method"] == "sendPhoto"]
        assert len(photo) == 1 and photo[0]["filename"] == "pulse-7d.png"
        assert "3 new memories" in caption and f"{PALETTE[0][0]} work 2" in caption and "family 1" in caption
        assert "Tue 03-10" not in caption  # the per-day counts are the picture
        width, height, rows, _ = png.Reader(bytes=photo[0]["data"]).asRGB8()
        pixels = {tuple(r[i:i + 3]) for r in rows for i in range(0, len(r), 3)}
        assert (width, height) == (640, 320) and PALETTE[0][1] in pixels and PALETTE[1][1] in pixels

        # The console cannot show a picture: the same command answers with the text summary.
        # (The console is its own person, so it gets its own, empty pulse, then one after /remember.)
        with os.fdopen(write_fd, "w") as w:
            w.write("/remember I like tea.\n/pulse\n")
        await bot.tg.wait_until(lambda: "Memory pulse" in console_out.getvalue(), 30)
        out = console_out.getvalue()
        assert "last 7 days: 1 new memory." in out and "Tue 03-10  ▇▇▇▇▇▇▇▇ 1" in out and ".png" not in out

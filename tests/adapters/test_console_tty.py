"""The terminal channel in a real pseudo-terminal (issue 15): line editing keeps arrow keys out of
messages, history recalls earlier lines, the prompt comes back under every reply, and Ctrl-D,
Ctrl-C, /quit and bare `quit` leave with status 0 after the last turn is captured."""

from __future__ import annotations

import pytest

from tests.adapters.pty_screen import Tty, tty_env
from tests.fakes import brain
from tests.reliability.procs import is_reply_request, stored_user_texts

pytestmark = pytest.mark.timeout(600)  # real subprocesses on a shared 2-core machine

LEFT, UP = "\x1b[D", "\x1b[A"


def user_texts_sent_to_the_model(fake_llm) -> list[str]:
    return [r["messages"][-1]["content"] for r in fake_llm.requests if is_reply_request(r)]


async def chat(tmp_path, fake_llm, *args: str) -> Tty:
    fake_llm.responder = brain.respond
    tty = Tty(["-m", "bot.cli", "chat", "--user", "ann", *args], tty_env(tmp_path, fake_llm.base_url))
    await tty.prompt("ann> ")
    return tty


async def test_arrow_keys_edit_the_line_and_never_reach_the_message(tmp_path, fake_llm):
    tty = await chat(tmp_path, fake_llm)
    try:
        tty.send("\x0c")                         # Ctrl-L clears the screen, it is no character
        await tty.prompt("ann> ")
        tty.send("first message" + LEFT * 2 + "X\r")
        await tty.shows("You said: first messaXge")
        await tty.prompt("ann> ")
        tty.send(UP + "\r")                       # history: the same line again
        await tty.wait_screen(lambda lines: sum("You said: first messaXge" in line for line in lines) == 2,
                              "the second reply")
        await tty.prompt("ann> ")
        tty.send("\x04")
        assert await tty.exit_status() == 0
    finally:
        tty.close()
    assert user_texts_sent_to_the_model(fake_llm) == ["first messaXge", "first messaXge"]
    assert stored_user_texts(tmp_path / "data") == ["first messaXge", "first messaXge"]
    assert "first messaXge" in (tmp_path / "data" / "console_history").read_text()


async def test_the_prompt_comes_back_under_every_reply(tmp_path, fake_llm):
    tty = await chat(tmp_path, fake_llm)
    try:
        for word in ("one", "two", "three"):
            tty.send(f"reply to {word}\r")
            await tty.shows(f"You said: reply to {word}")
            await tty.prompt("ann> ")
        lines = tty.screen_lines()
        replies = [n for n, line in enumerate(lines) if line.startswith("memgate: ") and "You said: reply to" in line]
        assert len(replies) == 3
        # Each reply on a line of its own, never glued to a prompt, and the prompt under the last one.
        assert all("ann>" not in lines[n] for n in replies)
        shown = [n for n, line in enumerate(lines) if line]
        assert lines[shown[-1]] == "ann>" and shown[-1] > replies[-1]
        assert tty.cursor_line() == "ann>"
        tty.send("\x04")
        assert await tty.exit_status() == 0
    finally:
        tty.close()


async def test_ctrl_d_right_after_a_message_exits_0_once_the_turn_is_captured(tmp_path, fake_llm):
    tty = await chat(tmp_path, fake_llm)
    try:
        tty.send("remember that my bike is green\r")
        tty.send("\x04")
        assert await tty.exit_status() == 0
    finally:
        tty.close()
    assert stored_user_texts(tmp_path / "data") == ["remember that my bike is green"]


@pytest.mark.parametrize("leave", ["\x03", "quit\r", "exit\r", "/quit\r", "/exit\r"])
async def test_ctrl_c_and_quit_words_leave_cleanly(tmp_path, fake_llm, leave):
    tty = await chat(tmp_path, fake_llm)
    try:
        tty.send("hello there\r")
        await tty.shows("You said: hello there")
        await tty.prompt("ann> ")
        tty.send(leave)
        assert await tty.exit_status() == 0
        assert "Traceback" not in "".join(tty._screen.raw)
    finally:
        tty.close()
    assert user_texts_sent_to_the_model(fake_llm) == ["hello there"]


async def test_help_lists_how_to_leave(tmp_path, fake_llm):
    tty = await chat(tmp_path, fake_llm)
    try:
        tty.send("/help\r")
        await tty.shows("leave the terminal chat")
        await tty.prompt("ann> ")
        screen = tty.screen()
        assert "/exit" in screen and "Ctrl-D" in screen
        tty.send("\x04")
        assert await tty.exit_status() == 0
    finally:
        tty.close()


async def test_run_in_a_terminal_keeps_logs_out_of_the_prompt_and_ctrl_d_ends_it(tmp_path, fake_llm):
    fake_llm.responder = brain.respond
    env = tty_env(tmp_path, fake_llm.base_url, MEMGATE_API_ENABLED="false", MEMGATE_LOG_LEVEL="DEBUG")
    (tmp_path / "none.toml").write_text('[channels.console]\nuser = "ann"\n')
    tty = Tty(["-m", "bot.cli", "run"], env)
    try:
        await tty.prompt("ann> ")
        tty.send("hello from run\r")
        await tty.shows("You said: hello from run")
        await tty.prompt("ann> ")
        tty.send("\x04")
        assert await tty.exit_status() == 0
    finally:
        tty.close()
    everything = "".join(tty._screen.raw)
    assert "level=" not in everything and "LiteLLM" not in everything
    log = (tmp_path / "data" / "memgate.log").read_text()
    assert "starting channels: console" in log and "level=DEBUG" in log


# The terminal channel alone on a pty, with the process's loop handler as `memgate chat` sets it,
# and a turn that leaves an error no task handles (what a library's orphaned task does).
STRAY_ERROR_CHAT = """
import asyncio, logging, sys
from adapters.console import ConsoleAdapter
from bot.logs import log_loop_exceptions
from bot.message import Reply

logging.basicConfig(filename=sys.argv[1], level=logging.INFO)

async def main():
    console = ConsoleAdapter("ann")
    seen, tasks = [], set()

    async def answer(text, turn):
        await asyncio.sleep(0.3)  # the prompt is back: the gateway answers in a task of its own
        asyncio.get_running_loop().call_exception_handler({"message": "a stray error of turn %d" % turn})
        await console.send(Reply(channel="console", chat_id="ann", text="got " + text))

    async def inbound(msg):
        seen.append(msg.text)
        tasks.add(asyncio.create_task(answer(msg.text, len(seen))))

    log_loop_exceptions(asyncio.get_running_loop())
    await console.start(inbound)
    await console.closed.wait()
    print("seen:", seen)

asyncio.run(main())
"""


async def test_an_error_no_task_handled_is_logged_and_never_takes_the_keys(tmp_path):
    log = tmp_path / "chat.log"
    tty = Tty(["-c", STRAY_ERROR_CHAT, str(log)], tty_env(tmp_path, None))
    try:
        await tty.prompt("ann> ")
        tty.send("first\r")
        await tty.shows("got first")
        # A hijacked terminal shows "Press ENTER to continue" and never the prompt: fail in a minute.
        await tty.prompt("ann> ", timeout=60)
        tty.send("second\r")      # typed as soon as the prompt is back, as people do
        await tty.shows("got second")
        await tty.prompt("ann> ")
        tty.send("/quit\r")
        await tty.shows("seen: ['first', 'second']")
        assert await tty.exit_status() == 0
        assert "Press ENTER" not in tty.transcript() and "stray" not in tty.transcript()
    finally:
        tty.close()
    assert "a stray error of turn 1" in log.read_text() and "a stray error of turn 2" in log.read_text()


# The terminal channel alone on a pty, with a hand-over that takes its time (the gateway making
# the line durable on a busy disk): what is typed meanwhile must reach the next prompt.
SLOW_HAND_OVER_CHAT = """
import asyncio, sys
from adapters.console import ConsoleAdapter

async def main():
    console = ConsoleAdapter("ann")
    seen = []

    async def inbound(msg):
        await asyncio.sleep(1.5)  # no prompt reads while this runs
        seen.append(msg.text)

    await console.start(inbound)
    await console.closed.wait()
    print("seen:", seen)

asyncio.run(main())
"""


@pytest.mark.parametrize("then", ["\x04", "second\r\x04", "\x03"])
async def test_keys_typed_while_a_line_is_handed_over_reach_the_next_prompt(tmp_path, then):
    tty = Tty(["-c", SLOW_HAND_OVER_CHAT], tty_env(tmp_path, None))
    try:
        await tty.prompt("ann> ")
        tty.send("first\r")
        # The line is accepted (the cursor left the prompt line) and is being handed over: no
        # prompt reads now. What comes next is typed in that gap.
        await tty.wait_screen(lambda lines: tty.cursor_line() == "" and "ann> first" in lines, "the line accepted")
        tty.send(then)
        expected = ["first", "second"] if "second" in then else ["first"]
        await tty.shows(f"seen: {expected!r}", timeout=60)
        assert await tty.exit_status() == 0
    finally:
        tty.close()

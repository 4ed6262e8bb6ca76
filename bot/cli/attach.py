"""`memgate chat` attached to a running gateway (issue 24): this terminal's channel (the console
adapter cli/run.py builds: line editing, history, spinner, Ctrl-C, Tab) with its lines handed to
the gateway's API by bot.operator.chat_client and the gateway's events (typing, the reply as it is
written, replies, closing) shown on it. The gateway does the turn (inbox, queue, access, agent, capture); this process loads
no database, model or LLM library.
"""

from __future__ import annotations

import asyncio
import base64
import signal
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime

from bot.channel import MenuCommand
from bot.logs import log_loop_exceptions
from bot.message import Document, Message, Reply
from bot.operator.chat_client import ChatLink, LineRefused
from bot.settings import Settings


async def chat_through(settings: Settings, client, console, key: str | None, *,
                       banner: Callable[[Settings, str, str], str]) -> str | None:
    """Run the attached chat until the person leaves (None) or the gateway goes (why, for the person)."""
    log_loop_exceptions(asyncio.get_running_loop())
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    async with ChatLink(client, console.user, key) as link:
        console.bot_name, console.user = link.bot_name, link.user   # a key talks as the gateway names it
        own = {name for name, _ in console.local_commands()}
        console.set_command_menu([MenuCommand(n, "") for n in link.commands if n not in own])  # Tab completes them
        console.on_cancel = lambda channel, chat: link.cancel()                       # Ctrl-C stops the reply
        if console.interactive:
            print(banner(settings, console.user, f" through the running gateway at {client.url}"), flush=True)
        thinking: dict[str, AsyncExitStack] = {}
        drafts: dict[str, tuple[object, str]] = {}   # per line answered: its reply's draft, and its text so far

        def reply(text: str, document: Document | None = None) -> Reply:
            return Reply(channel=console.name, chat_id=link.chat, text=text, document=document)

        async def hand_in(msg: Message) -> None:
            try:
                await link.send(msg.text, msg.message_id or "")
            except LineRefused as exc:
                await console.send(reply(f"(not sent: {exc})"))

        async def show_draft(event: dict) -> None:
            """The reply so far: what this terminal has of it up to `from`, then `text` (bot.api.attached)."""
            line = event.get("reply_to") or ""
            draft, text = drafts.get(line) or (console.open_draft(reply("")), "")
            if event.get("dropped"):
                drafts.pop(line, None)
                await draft.drop()
                return
            text = text[: int(event.get("from") or 0)] + str(event.get("text") or "")
            drafts[line] = (draft, text)
            await draft.show(text)

        async def show() -> str:
            async for event in link.events():
                kind = event.get("type")
                if kind == "draft":
                    await show_draft(event)
                elif kind == "reply":
                    drafts.pop(event.get("reply_to") or "", None)   # the console puts the reply in its place
                    doc = event.get("document")
                    await console.send(reply(event.get("text", ""), doc and Document(
                        doc["filename"], base64.b64decode(doc["data"]))))
                elif kind == "typing" and event.get("on"):
                    stack = thinking.setdefault(event.get("message_id") or "", AsyncExitStack())
                    await stack.enter_async_context(console.typing(Message(
                        channel=console.name, chat_id=link.chat, sender_id=console.user, text="",
                        timestamp=datetime.now(UTC))))
                elif kind == "typing":
                    stack = thinking.pop(event.get("message_id") or "", None)
                    if stack is not None:
                        await stack.aclose()
                elif kind == "closing":
                    return "the gateway stopped; this chat ended with it"
            return f"the line to the gateway at {client.url} broke; this chat ended"

        await console.start(hand_in)
        shower = asyncio.create_task(show(), name="attached-replies")
        leaving = [asyncio.create_task(console.closed.wait()), asyncio.create_task(stop.wait())]
        try:
            await asyncio.wait([shower, *leaving], return_when=asyncio.FIRST_COMPLETED)
            if not shower.done():
                # The person left: show the answers to what they already sent (the gateway answers
                # and captures them either way), as the in-process chat does before it exits.
                await asyncio.wait([shower, asyncio.create_task(link.answered.wait())],
                                   timeout=settings.agent.turn_timeout + 10, return_when=asyncio.FIRST_COMPLETED)
                return None
            return shower.result()
        finally:
            for task in (shower, *leaving):
                task.cancel()
            for stack in thinking.values():
                await stack.aclose()
            await console.stop()

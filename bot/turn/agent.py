"""The turn (DESIGN section 3): auto-recall -> prompt -> LLM with tools -> reply -> capture.

The memory block goes into the system message, never into the user's message, so what is
captured is what the person said. Capture happens before the reply is sent: a crash after
the reply loses no turn, and the ingest queue makes its ingestion exactly-once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeVar

from bot.media.reader import DocumentText
from bot.reminders.views import local_now
from bot.turn.approvals import Approvals, PendingWrite
from bot.turn.limits import RECALL_QUERY_CHARS, cap_message, cap_reply
from bot.turn.sessions import alternating
from bot.observe import NoObserver, TurnObserver
from bot.turn.tools import ToolBox, ToolContext
from memory import prompts
from memory.ingest.capture import CapturedTurn, TurnMessage
from memory.engine import MemoryEngine
from memory.interrupt import until_set
from memory.errors import LLMError, ModelNotRouted, ModelSilent, ModelTurnedDown, ModelUnreachable
from memory.llm import LLM, charged_to
from memory.recall.block import extend_block
from memory.recall.query import recall_query
from memory.text import estimate_tokens, frame_attribute, neutralize

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """Everything the agent needs for one turn, already resolved by the gateway."""

    text: str
    turn_id: str
    session_id: str
    history: tuple[dict, ...]
    ctx: ToolContext
    channel: str
    speaker: str | None = None
    images: tuple[str, ...] = ()                # data: URLs of pictures for a reply model that sees
    documents: tuple[DocumentText, ...] = ()    # files the person sent: read now, remembered as chunks
    # Set when the person asks to stop the reply (the terminal's Ctrl-C): the model's work is
    # dropped, what they said is captured all the same.
    cancel: asyncio.Event | None = None
    # Given the reply so far while the model writes it (the gateway shows it: bot.delivery.drafts).
    # What is finally sent is `TurnResult.reply`, which replaces whatever was shown.
    on_text: Callable[[str], None] | None = None
    # Called once the model has finished (or failed): what it wrote comes next as the reply, so
    # nothing more is shown of it meanwhile.
    on_written: Callable[[], None] | None = None


@dataclass(slots=True)
class TurnResult:
    reply: str
    captured: bool
    recalled: int
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    failed: bool = False
    cancelled: bool = False     # stopped by the person: `reply` is empty and nothing is sent


@dataclass(frozen=True)
class AgentSettings:
    name: str = "memgate"
    max_tool_rounds: int = 4
    turn_timeout: float = 120.0
    extra_system: str = ""
    max_message_chars: int = 20_000     # what the model reads of one message (stored whole)
    max_reply_chars: int = 20_000       # longer replies are cut at a boundary, with a note
    model_address: str = "the model server"  # shown when the model fails (never a key)
    down_hint: str = ""                 # logged when the model fails: what to run to bring it back
    model: str = ""                     # the configured reply model's name, shown when it cannot be routed
    route_fix: str = ""                 # what to change when it cannot be routed (a setting, not a server)
    document_chunk_chars: int = 1500    # one memory row per piece of a document of this size


class TurnCancelled(Exception):
    """The person stopped the reply being written."""


async def unless_cancelled(work: Awaitable[T], cancel: asyncio.Event | None) -> T:
    """`work`'s result, or TurnCancelled as soon as `cancel` is set (the work is cancelled and
    awaited: an LLM call in flight is closed, not left running)."""
    if cancel is None:
        return await work
    task = await until_set(work, cancel)
    if task.cancelled():
        raise TurnCancelled
    return task.result()


class Agent:
    """Runs turns. Holds no per-conversation state: the gateway serialises each conversation."""

    def __init__(self, engine: MemoryEngine, llm: LLM, tools: ToolBox, settings: AgentSettings | None = None,
                 *, clock: Callable[[], datetime], skills=None, observer: TurnObserver | None = None,
                 approvals: Approvals | None = None) -> None:
        self.skills = skills  # a SkillEvolver, when tasks and skills are on
        self.approvals = approvals  # None: no write beyond the speaker's space is ever offered
        self.observer = observer or NoObserver()
        self.engine = engine
        self.llm = llm
        self.tools = tools
        self.settings = settings or AgentSettings()
        self.clock = clock
        # Set by bot.turn.reminder_wiring: the zone of the turn's space, for the prompt's time line.
        self.local_zone: Callable[[ToolContext], Awaitable[str]] | None = None

    async def run(self, req: TurnRequest) -> TurnResult:
        """One turn: recall, the LLM (with tools), capture. Its LLM calls count for the turn's space."""
        with charged_to(req.ctx.write_space):
            return await self._run(req)

    async def _run(self, req: TurnRequest) -> TurnResult:
        # Memory far behind (30 busy chats on a small machine): this turn waits for it to catch
        # up first, so memory keeps the share of the machine it needs (memory.ingest.worker).
        await self.engine.ingest_room()
        t0 = time.perf_counter()
        # "and her?" means nothing alone: the query is built from the person's recent messages.
        query = recall_query([(m["role"], str(m["content"])) for m in req.history], req.text, max_chars=RECALL_QUERY_CHARS)
        block, hits = await self.engine.recall_block(query, req.ctx.space_ids, shared_spaces=(req.ctx.public_space,))
        block, skill_spaces = await self._with_skills(block, query, req.ctx.space_ids)
        proposals: list[PendingWrite] = []
        ctx = self._turn_context(req.ctx, {h.space_id for h in hits} | skill_spaces, proposals)
        t_recall = time.perf_counter()
        # Inside charged_to: a listener that records per space knows whose turn this was.
        self.observer.on_recall(t_recall - t0, estimate_tokens(block) if block else 0)
        now = self.clock()
        # The person's local time and zone, when reminders know it: "tomorrow at 9" is theirs.
        shown = local_now(now, await self.local_zone(req.ctx)) if self.local_zone else f"{now:%Y-%m-%d %H:%M %Z}".strip()
        system = prompts.AGENT_SYSTEM.format(name=self.settings.name, channel=req.channel, now=shown)
        if self.settings.extra_system:
            system += "\n\n" + self.settings.extra_system
        system += "\n\n" + (block or prompts.NO_MEMORY_HINT)
        if req.images:
            system += "\n\n" + prompts.DESCRIBE_IMAGES.format(count=len(req.images))
        # What people wrote (history, this message) keeps its roles, but no chat-template token in
        # it may forge another turn; the memory block is neutralised where it is rendered.
        # Roles alternate as chat templates require: a failed turn's words, kept in the history
        # without an answer, join this message instead of standing as a user message of their own.
        history, text = alternating(req.history, req.text)
        said = cap_message(neutralize(text) + _documents_part(req.documents), self.settings.max_message_chars)
        user: str | list[dict] = said if not req.images else [
            {"type": "text", "text": said}, *({"type": "image_url", "image_url": {"url": url}} for url in req.images)]
        messages: list[dict] = [{"role": "system", "content": system},
                                *({**m, "content": neutralize(m["content"])} for m in history),
                                {"role": "user", "content": user}]
        t_prompt = time.perf_counter()
        calls_before = self.llm.usage.total_calls()
        tokens_before = (sum(self.llm.usage.prompt_tokens.values()), sum(self.llm.usage.completion_tokens.values()))
        captured_msgs: list[TurnMessage] = []
        failed = cancelled = cut = False
        llm_ms = 0.0
        try:
            reply, tool_msgs, llm_ms, cut = await unless_cancelled(self._within_turn_timeout(messages, ctx, req),
                                                                   req.cancel)
            capped = cap_reply(reply, self.settings.max_reply_chars)
            cut, reply = cut or capped != reply, capped
            captured_msgs += tool_msgs
        except TurnCancelled:
            log.info("turn %s: the reply was cancelled by the person", req.turn_id)
            reply, failed, cancelled = "", True, True
            proposals.clear()
        except TimeoutError:
            # The turn until its answer is written, the wait for the model's slot included
            # (memory/llm_gate.py logs a reply's long wait there): the one limit a person can hit
            # that is not the model's own.
            log.warning("turn %s: the answer had not started within [agent] turn_timeout (%g s) from %s; a slow "
                        "model needs it raised with [llm] first_token_timeout", req.turn_id, self.settings.turn_timeout,
                        self.settings.model_address)
            reply, failed = prompts.TIMEOUT_APOLOGY.format(address=self.settings.model_address), True
        except LLMError as exc:
            log.warning("turn %s: LLM failed (%s): %s; %s", req.turn_id, self.settings.model_address, exc,
                        (f"llm.model (MEMGATE_LLM_MODEL): {self.settings.route_fix}" if isinstance(exc, ModelNotRouted)
                         else self.settings.down_hint) or "`memgate doctor` checks the model")
            reply, failed = self._model_trouble(exc, req), True
        if not failed and not reply.strip():
            # Nothing readable (blank lines up to the token limit): told as such, never sent as an
            # empty message, and not kept as what the bot said.
            log.warning("turn %s: the model's answer held no text (%s)", req.turn_id, self.settings.model_address)
            reply, failed = prompts.EMPTY_ANSWER_APOLOGY.format(address=self.settings.model_address), True
        t_llm = time.perf_counter()
        if req.on_written is not None:
            req.on_written()
        said_text = req.text
        if req.images and not failed:
            # The model described the pictures in its first lines: memory keeps what they showed.
            reply, described = take_descriptions(reply)
            said_text = with_descriptions(req.text, described)
        captured_msgs.insert(0, TurnMessage("user", said_text, speaker=req.speaker))
        if not failed and not cut:
            # A reply the model stopped at its token limit, or we cut for length, is unfinished: the
            # person gets it, memory does not (it would be recalled as what the bot said).
            captured_msgs.append(TurnMessage("assistant", reply))
        # The person's words are kept even when the model failed: nothing they said is lost.
        captured = await self.engine.capture(CapturedTurn(
            space_id=req.ctx.write_space, session_id=req.session_id, turn_id=req.turn_id,
            created_at=now, messages=tuple(captured_msgs)))
        for doc in req.documents:  # kept whatever the model did: the person asked us to read it
            await self.engine.remember_document(doc.name, doc.text, req.ctx.write_space,
                                                piece_chars=self.settings.document_chunk_chars,
                                                session_id=req.session_id, turn_id=req.turn_id)
        t_end = time.perf_counter()
        if proposals and not failed and self.approvals is not None:
            # Shown by us, not by the model: it cannot leave a proposed write out or misstate it.
            reply = "\n\n".join([reply, *(self.approvals.notice(p) for p in proposals)])
        return TurnResult(
            reply=reply, captured=captured, recalled=len(hits),
            llm_calls=self.llm.usage.total_calls() - calls_before,
            prompt_tokens=sum(self.llm.usage.prompt_tokens.values()) - tokens_before[0],
            completion_tokens=sum(self.llm.usage.completion_tokens.values()) - tokens_before[1],
            timings_ms={"recall": (t_recall - t0) * 1000, "prompt": (t_prompt - t_recall) * 1000,
                        "llm": llm_ms, "capture": (t_end - t_llm) * 1000,
                        "outside_llm": (t_end - t0) * 1000 - llm_ms},
            failed=failed, cancelled=cancelled)

    def _model_trouble(self, exc: LLMError, req: TurnRequest) -> str:
        """What the person is told when the model failed: a refused address and a silent server as
        such, with what to run for whoever can run it (the terminal's person, an admin)."""
        address = self.settings.model_address
        can_act = req.channel == "console" or req.ctx.may_write_public
        if isinstance(exc, ModelNotRouted):
            fix = f" Set llm.model (MEMGATE_LLM_MODEL): {self.settings.route_fix}." if can_act and self.settings.route_fix else ""
            return prompts.LLM_NOT_ROUTED_APOLOGY.format(model=self.settings.model, hint=fix)
        hint = f" {self.settings.down_hint[:1].upper()}{self.settings.down_hint[1:]}" if can_act and self.settings.down_hint else ""
        if isinstance(exc, ModelUnreachable):
            return prompts.LLM_UNREACHABLE_APOLOGY.format(address=address, hint=hint)
        if isinstance(exc, ModelSilent):
            return prompts.LLM_SILENT_APOLOGY.format(address=address, seconds=exc.seconds, hint=hint)
        if isinstance(exc, ModelTurnedDown):
            why = prompts.TURNED_DOWN_WHY.get(exc.status, f"status {exc.status}")
            return prompts.LLM_TURNED_DOWN_APOLOGY.format(address=address, why=why, hint=hint)
        return prompts.LLM_DOWN_APOLOGY.format(address=address)

    async def _with_skills(self, block: str, query: str, space_ids: Sequence[str]) -> tuple[str, set[str]]:
        """Add at most `inject_skills` relevant skills (name + description) to the memory block;
        also returns the spaces they came from."""
        limit = self.engine.recall_settings.inject_skills
        if self.skills is None or limit <= 0:
            return block, set()
        try:
            found = await self.skills.search(query, space_ids, limit=limit)
        except Exception:
            log.warning("skill recall failed", exc_info=True)
            return block, set()
        if not found:
            return block, set()
        await self.skills.count_usage([s.id for s in found])
        return extend_block(block, [f"- skill {s.name} (v{s.version}): {s.description} — read it with skill_get"
                                    for s in found]), {s.space_id for s in found}

    def _turn_context(self, ctx: ToolContext, recalled: set[str], proposals: list[PendingWrite]) -> ToolContext:
        """The turn's tool context: it may propose writes beyond the speaker's space (bot.approvals)
        only in their own DM, when they may write there, and when nothing recalled is another space's."""
        others = recalled - set(ctx.own_spaces)
        if self.approvals is None or not ctx.private_chat or not ctx.may_write_public or others or not ctx.speaker:
            return replace(ctx, propose=None)
        approvals = self.approvals

        def propose(what: str, run) -> str:
            p = approvals.propose(ctx.speaker, ctx.conversation, what, run)
            proposals.append(p)
            return p.code

        return replace(ctx, propose=propose)

    async def _within_turn_timeout(self, messages: list[dict], ctx: ToolContext,
                                   req: TurnRequest) -> tuple[str, list[TurnMessage], float, bool]:
        """`_loop` within [agent] turn_timeout until the answer's first words are written; from then
        on the model's own limits bound it ([llm] timeout between two pieces, max_tokens), so a
        slow model's reply the person watches grow is not cut off for time and replaced by an
        apology (seen with llama.cpp on a busy CPU: 1,024 tokens at 8 tokens/s)."""
        show = self._shown_while_written(req)
        async with asyncio.timeout(self.settings.turn_timeout) as deadline:
            def written(text: str) -> None:
                if text.strip() and deadline.when() is not None:
                    deadline.reschedule(None)
                if show is not None:
                    show(text)

            return await self._loop(messages, ctx, written)

    def _shown_while_written(self, req: TurnRequest) -> Callable[[str], None] | None:
        """What of the reply being written goes to `req.on_text`: as the finished reply will be,
        without the leading picture descriptions (held back until they are written) and cut at
        max_reply_chars."""
        on_text, limit = req.on_text, self.settings.max_reply_chars
        if on_text is None:
            return None

        def show(text: str) -> None:
            if req.images:
                if text.lstrip().startswith("[") and "\n" not in text.lstrip():
                    return  # maybe a description still being written
                text = take_descriptions(text)[0]
            on_text(text[:limit])

        return show

    async def _loop(self, messages: list[dict], ctx: ToolContext,
                    on_text: Callable[[str], None] | None = None) -> tuple[str, list[TurnMessage], float, bool]:
        """Up to max_tool_rounds rounds of tool calls, then a final answer without tools. Each
        round's text goes to `on_text` as it is written (a round that calls tools mostly has none).
        Returns the answer, the tool messages, the LLM time and whether the answer was cut short."""
        tool_msgs: list[TurnMessage] = []
        llm_ms = 0.0
        others_visible = set(ctx.space_ids) - set(ctx.own_spaces)
        for round_no in range(self.settings.max_tool_rounds + 1):
            use_tools = round_no < self.settings.max_tool_rounds
            t = time.perf_counter()
            schemas = self.tools.schemas_for(ctx) if use_tools else None
            result = await self.llm.complete(messages, purpose="reply", tools=schemas, on_text=on_text)
            llm_ms += (time.perf_counter() - t) * 1000
            if not result.tool_calls or not use_tools:
                return result.content.strip(), tool_msgs, llm_ms, result.cut
            messages.append({"role": "assistant", "content": result.content or None, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in result.tool_calls]})
            shown_others = False
            for tc in result.tool_calls:
                output = await self.tools.execute(tc.name, tc.arguments, ctx)
                # Tool results carry stored text: it must not forge a role in the next round.
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": neutralize(output)})
                tool_msgs.append(TurnMessage("tool", output, tool_name=tc.name))
                shown_others |= bool(others_visible) and self.tools.shows_others(tc.name)
            if shown_others and ctx.propose is not None:
                # A result may hold other people's words now: from here on nothing is proposed.
                ctx = replace(ctx, propose=None)
        raise AssertionError("unreachable")



_DESCRIPTION = re.compile(r"\A\s*\[(?:photo|image|picture):\s*([^\]\n]{1,400})\]\s*\n?", re.IGNORECASE)


def take_descriptions(reply: str) -> tuple[str, list[str]]:
    """The reply without its leading `[photo: ...]` lines, and those descriptions in order."""
    found: list[str] = []
    while (m := _DESCRIPTION.match(reply)) is not None:
        found.append(" ".join(m.group(1).split()))
        reply = reply[m.end():]
    return (reply.strip() or "…") if found else reply, found


def with_descriptions(text: str, described: Sequence[str]) -> str:
    """"[photo] caption" -> "[photo: a brown dog on a beach] caption", one description per picture."""
    for description in described:
        if "[photo]" not in text:
            break
        text = text.replace("[photo]", f"[photo: {description}]", 1)
    return text


def _documents_part(documents: Sequence[DocumentText]) -> str:
    """The documents after the person's words, each in our frame: its name and text neutralised
    (memory.text: no spelling of a frame's tag in them opens or closes one)."""
    parts = []
    for doc in documents:
        parts.append(prompts.DOCUMENT_PART.format(name=frame_attribute(doc.name), text=neutralize(doc.text))
                     + (f"\n{prompts.DOCUMENT_CUT_NOTE}" if doc.cut else ""))
    return "".join(f"\n\n{p}" for p in parts)

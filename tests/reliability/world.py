"""A small world of people, groups, identity links and public writes, driven through the real
gateway (RecordingChannels for Telegram and WeChat, real access, commands, agent, litellm against
the fake LLM server, DuckDB and the local embedder), and the count of what leaked.

Every person stores a marker in their own space, every group one in its space, and every public
write carries one; every person also sends a text file and a voice note (transcribed by the fake
speech server) that carry markers of their own (issue 25: media stay in their space too). `lost` counts messages left unanswered and markers their owner is never shown. The world keeps its own model of who may read which space (a person: their
space, the spaces they kept when they joined another by /link, and public; a group: its space
and public) and then looks at everything each person or group is shown: the system prompts and
every other message the agent sent to the LLM (tool results included), command answers and
exports. A marker found where the model says it may not be is one leak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.app import build_app
from bot.config import load_settings
from memory.embed import Embedder, LocalE5Embedder
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from bot.message import Kind, Media
from tests.fakes.llm_server import FakeLLM, ToolCall, fake_audio
from tests.reliability.harness import Counts

CHANNELS = ("telegram", "wechat")
_REMEMBERED = re.compile(r"Remembered \[([a-z]+_[0-9a-f]{12})\]")
_LINK_CODE = re.compile(r"link code: ([A-Z0-9]{8})")
_CONFIRM = re.compile(r"/confirm ([A-Z0-9]{6})")


@dataclass(frozen=True)
class Plan:
    """What happens: `people` as (channel index, id); `links` as (issuer, claimant, confirmed);
    `groups` as (group number, speaker); `public_writes` by person. Person 0 is the owner."""

    people: tuple[tuple[int, str], ...]
    links: tuple[tuple[int, int, bool], ...] = ()
    groups: tuple[tuple[int, int], ...] = ()
    public_writes: tuple[int, ...] = ()


def person_marker(i: int, round_: int) -> str:
    return f"KX{i:02d}R{round_}QV"


def group_marker(g: int) -> str:
    return f"GZ{g:02d}WQ"


def public_marker(i: int) -> str:
    return f"PB{i:02d}NJ"


def file_marker(i: int) -> str:
    return f"FD{i:02d}MX"


def voice_marker(i: int) -> str:
    return f"VN{i:02d}TZ"


@dataclass
class _Model:
    """Who may read which space, as the world understands it (independent of bot/access/)."""

    main: dict[int, str] = field(default_factory=dict)     # person -> the space they write to
    kept: dict[int, set[str]] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)    # marker -> space it was stored in

    def readable(self, person: int) -> set[str]:
        return {self.main[person], *self.kept[person], "public"}

    def link(self, issuer: int, claimant: int) -> None:
        old, target = self.main[claimant], self.main[issuer]
        for q, space in list(self.main.items()):
            if space == old:
                self.kept[q].add(old)
                self.main[q] = target


def _responder(plan_text: dict[str, object]):
    """Reply turns: 'OK.' unless the user's words name a scripted tool round."""

    def respond(req: dict) -> object:
        messages = req["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            return "Done."
        if last["role"] == "user":
            for phrase, script in plan_text.items():
                if last["content"].startswith(phrase):
                    return script(last["content"]) if callable(script) else script
        return "OK."

    return respond


class World:
    """One running bot and the people in it."""

    def __init__(self, app, channels: dict[str, RecordingChannel], llm: FakeLLM, plan: Plan) -> None:
        self.app, self.channels, self.llm, self.plan = app, channels, llm, plan
        self.model = _Model()
        self.memory_ids: list[str] = []
        self.messages_in = 0
        self.answered = 0

    def who(self, i: int) -> tuple[RecordingChannel, str]:
        ch, pid = self.plan.people[i]
        return self.channels[CHANNELS[ch]], pid

    async def say(self, i: int, text: str, *, group: int | None = None, media: tuple[Media, ...] = (),
                  kind: Kind = Kind.TEXT) -> tuple[list, list[dict]]:
        """Person i says `text` (in a DM, or in group `group`), with `media` attached; what came
        back to that chat and the LLM requests the turn made."""
        channel, pid = self.who(i)
        chat = f"-10{group}" if group is not None else pid
        sent_before, asked_before = len(channel.sent), len(self.llm.requests)
        msg = await channel.say(pid, text, chat=chat, is_group=group is not None, mentions_bot=group is not None,
                                media=media, kind=kind)
        await self.app.gateway.idle()
        self.messages_in += 1
        replies = [r for r in channel.sent[sent_before:] if r.chat_id == chat]
        self.answered += any(r.reply_to == msg.message_id or r.document is not None for r in replies)
        return replies, self.llm.requests[asked_before:]

    async def shown(self, i: int, *, group: int | None = None) -> str:
        """Everything person i (or group `group`, as spoken to by i) is shown: prompts, tool
        results, command answers and the export."""
        parts: list[str] = []
        # One agent turn shows the recall block (system prompt) and the tool results of a search
        # and of memory_get on every memory id in the world; then the search and export commands.
        for text in ("probe: what is my secret word?", "/memory secret word", "/export"):
            replies, requests = await self.say(i, text, group=group)
            parts += [r.text for r in replies]
            parts += [r.document.data.decode() for r in replies if r.document is not None]
            parts += [json.dumps(req["messages"], ensure_ascii=False) for req in requests]
        return "\n".join(parts)


async def run_world(tmp: Path, plan: Plan, *, embedder: Embedder | None = None, public_writers: str = "admins") -> Counts:
    """Drive the plan and count leaks (see the module docstring)."""
    world_ids: list[str] = []
    scripts: dict[str, object] = {
        "probe: ": lambda _text: [ToolCall("memory_search", {"query": "secret word", "scope": "all", "limit": 20}),
                                  *(ToolCall("memory_get", {"id": mid}) for mid in world_ids)],
        "share ": lambda text: [ToolCall("memory_write_public", {"text": f"public note {text.split()[-1]}"})],
    }
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "memgate.toml").write_text("")
    async with FakeLLM(_responder(scripts)) as llm:
        owner_ch, owner_id = plan.people[0]
        env = {"MEMGATE_CONFIG": str(tmp / "memgate.toml"), "MEMGATE_DATA_DIR": str(tmp / "data"),
               "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_CONCURRENCY": "64", "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
               "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_LLM_MEMORY_LLM": "false",
               "MEMGATE_ACCESS_OWNERS": f"{CHANNELS[owner_ch]}:{owner_id}", "MEMGATE_ACCESS_DM_POLICY": "open",
               "MEMGATE_ACCESS_GROUP_POLICY": "open", "MEMGATE_ACCESS_PUBLIC_WRITERS": public_writers,
               "MEMGATE_SPEECH_MODEL": "whisper-1", "MEMGATE_SPEECH_API_BASE": llm.base_url}
        channels = {name: RecordingChannel(name) for name in CHANNELS}
        app = build_app(load_settings(None, env=env), channels=list(channels.values()), clock=FakeClock().now,
                        embedder=embedder or LocalE5Embedder())
        async with app:
            w = World(app, channels, llm, plan)
            counts = await _drive(w, world_ids, public_writers)
            await app.gateway.idle()
        return counts


async def _drive(w: World, world_ids: list[str], public_writers: str) -> Counts:
    plan, m = w.plan, w.model
    for i in range(len(plan.people)):
        m.main[i], m.kept[i] = f"u{i}", set()

    async def remember(i: int, marker: str, space: str, group: int | None = None) -> None:
        replies, _ = await w.say(i, f"/remember my secret word is {marker}", group=group)
        found = _REMEMBERED.search(replies[0].text) if replies else None
        if found:
            world_ids.append(found.group(1))
        m.where[marker] = space

    for i in range(len(plan.people)):
        await remember(i, person_marker(i, 0), m.main[i])
    async def send_media(i: int) -> None:
        """A text file and a voice note, each saying a marker of person i's."""
        channel, _ = w.who(i)
        channel.files[f"file-{i}"] = f"my secret word is {file_marker(i)}".encode()
        channel.files[f"voice-{i}"] = fake_audio(f"my secret word is {voice_marker(i)}")
        await w.say(i, "", kind=Kind.FILE, media=(Media(Kind.FILE, f"file-{i}", name=f"notes{i}.txt", mime="text/plain"),))
        await w.say(i, "", kind=Kind.VOICE, media=(Media(Kind.VOICE, f"voice-{i}", mime="audio/ogg", duration=2.0),))
        m.where[file_marker(i)] = m.where[voice_marker(i)] = m.main[i]

    proposals_to_the_unallowed = 0
    for i in plan.public_writes:
        # A write to public is proposed and waits for the writer's own /confirm (bot.approvals); it
        # is not even offered once other people's words are in the prompt, nor to a plain user.
        replies, _ = await w.say(i, f"share {public_marker(i)}")
        code = _CONFIRM.search(" ".join(r.text for r in replies))
        if code:
            await w.say(i, f"/confirm {code.group(1)}")
            proposals_to_the_unallowed += not (i == 0 or public_writers == "everyone")
        # A marker made public stays public: a second share of it (the plan may repeat a writer)
        # finds it there already and proposes nothing, which must not move it back to the
        # writer's own space in the model (it was counted as a leak of its own public copy).
        if code or m.where.get(public_marker(i)) != "public":
            m.where[public_marker(i)] = "public" if code else m.main[i]
    for issuer, claimant, confirmed in plan.links:
        if issuer == claimant or m.main[issuer] == m.main[claimant]:
            continue
        replies, _ = await w.say(issuer, "/link")
        code = _LINK_CODE.search(replies[0].text).group(1)
        await w.say(claimant, f"/link {code}")
        await w.say(issuer, "/link yes" if confirmed else "/link no")
        if confirmed:
            await w.say(claimant, "/link yes")  # both accounts confirm a link
            m.link(issuer, claimant)
    for i in range(len(plan.people)):
        await remember(i, person_marker(i, 1), m.main[i])
        await send_media(i)
    await w.app.engine.worker.drain()  # the voice notes' turns are in memory before anyone looks
    seen_groups: set[int] = set()
    for g, speaker in plan.groups:
        if g not in seen_groups:
            seen_groups.add(g)
            await remember(speaker, group_marker(g), f"g{g}", group=g)

    leaks, unseen, notes = proposals_to_the_unallowed, 0, []
    if proposals_to_the_unallowed:
        notes.append(f"{proposals_to_the_unallowed} public write(s) proposed to people not allowed to write there")
    for i in range(len(plan.people)):
        text = await w.shown(i)
        allowed = m.readable(i)
        for marker, space in m.where.items():
            if space not in allowed and marker in text:
                leaks += 1
                notes.append(f"{marker} ({space}) -> person {i}")
        # The other half of the guarantee (and the proof the detector sees markers at all): a
        # person's own words come back to them.
        for own in (person_marker(i, 0), person_marker(i, 1), file_marker(i), voice_marker(i)):
            if own not in text:
                unseen += 1
                notes.append(f"{own} not shown to its owner {i}")
    for g in sorted(seen_groups):
        speaker = next(s for gg, s in plan.groups if gg == g)
        text = await w.shown(speaker, group=g)
        for marker, space in m.where.items():
            if space not in (f"g{g}", "public") and marker in text:
                leaks += 1
                notes.append(f"{marker} ({space}) -> group {g}")
    public_texts = [r.text for r in await w.app.engine.list(["public"], kinds=("fact", "chunk"), limit=100)]
    for marker, space in m.where.items():
        if space != "public" and any(marker in t for t in public_texts):
            leaks += 1
            notes.append(f"{marker} ({space}) stored in public")
    stored = w.app.store.read(lambda c: c.execute(
        "SELECT count(*) FROM memories WHERE kind = 'fact' AND status = 'active' AND text LIKE 'my secret word is %'"
    ).fetchone()[0])
    return Counts(scenario="", messages_in=w.messages_in, answered=w.answered, stored=stored,
                  lost=w.messages_in - w.answered + unseen, leaked=leaks, note="; ".join(notes[:5]))


def people_of(spec: Sequence[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    return tuple((ch % len(CHANNELS), pid) for ch, pid in spec)

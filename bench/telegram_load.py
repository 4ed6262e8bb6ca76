"""Telegram under load: many chats at once through the fake Bot API server, the real
python-telegram-bot adapter (long polling, AIORateLimiter), gateway, agent, litellm, DuckDB and
e5 embeddings, with the fake LLM answering as `brain`.

Two phases over the same chats (default 50 chats x 20 messages each):
- closed loop: every chat sends its next message once the previous one is answered, like people
  do; the time from update injection to reply is the latency a person sees;
- burst: every chat sends all its messages at once; this checks per-chat order under queueing.

Checks that no message is lost or answered twice and that each chat's replies come in order;
prints messages/s, p50/p95 of update -> reply, of that time minus the LLM, and of the agent's
own time outside the LLM (`TurnResult.timings_ms["outside_llm"]`: recall, prompt, capture).

    python bench/telegram_load.py [--chats 50] [--messages 20] [--phase both|closed|burst]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from aiohttp import web  # noqa: E402

from adapters.telegram.adapter import TelegramAdapter  # noqa: E402
from bot.turn.agent import TurnResult  # noqa: E402
from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from memory.ingest.capture import pending_count  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.llm_server import FakeLLM  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402

FIRST_USER = 100_000
MARKER = re.compile(r"chat (\d+) message (\d+)")


class TimedTelegram(FakeTelegram):
    """The fake Bot API, stamping when each reply arrives and waking whoever waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: dict[tuple[int, int], float] = {}  # (chat, quoted message id) -> perf_counter
        self.waiters: dict[tuple[int, int], asyncio.Future[str]] = {}

    async def _send_message(self, params: dict[str, Any]) -> web.Response:
        before = len(self.sent)
        response = await super()._send_message(params)
        if len(self.sent) > before:
            record = self.sent[-1]
            quoted = (record.get("reply_parameters") or {}).get("message_id")
            if quoted is not None:
                key = (record["chat_id"], quoted)
                self.arrivals.setdefault(key, time.perf_counter())
                waiter = self.waiters.pop(key, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(record["visible_text"])
        return response


@dataclass
class Sample:
    chat: int
    index: int
    message_id: int
    injected: float
    latency_ms: float = 0.0
    reply: str = ""


@dataclass
class Phase:
    name: str
    samples: list[Sample] = field(default_factory=list)
    turns: list[TurnResult] = field(default_factory=list)
    seconds: float = 0.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def text_of(chat: int, index: int) -> str:
    return f"chat {chat} message {index:02d}: I like tea and long walks, remember that please"


async def closed_loop(tg: TimedTelegram, chats: int, messages: int, timeout: float) -> list[Sample]:
    """Each chat sends, waits for its answer, then sends the next."""

    async def person(chat: int) -> list[Sample]:
        user = FIRST_USER + chat
        out = []
        for i in range(messages):
            waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            injected = time.perf_counter()
            msg = tg.inject_message(user, text_of(chat, i), first_name=f"User{chat}")
            tg.waiters[(user, msg["message_id"])] = waiter
            sample = Sample(chat, i, msg["message_id"], injected)
            sample.reply = await asyncio.wait_for(waiter, timeout)
            out.append(sample)
        return out

    per_chat = await asyncio.gather(*(person(c) for c in range(chats)))
    return [s for chat in per_chat for s in chat]


async def burst(tg: TimedTelegram, chats: int, messages: int, timeout: float) -> list[Sample]:
    """Every chat sends all its messages at once (interleaved across chats), then all are awaited."""
    samples, waiters = [], []
    for i in range(messages):
        for chat in range(chats):
            user = FIRST_USER + chat
            waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            injected = time.perf_counter()
            msg = tg.inject_message(user, text_of(chat, i), first_name=f"User{chat}")
            tg.waiters[(user, msg["message_id"])] = waiter
            samples.append(Sample(chat, i, msg["message_id"], injected))
            waiters.append(waiter)
    replies = await asyncio.wait_for(asyncio.gather(*waiters), timeout)
    for sample, reply in zip(samples, replies, strict=True):
        sample.reply = reply
    return samples


def check(tg: TimedTelegram, phase: Phase, chats: int, messages: int) -> list[str]:
    """Nothing lost or doubled, each reply answers its own message, per-chat order kept."""
    problems = []
    for s in phase.samples:
        arrived = tg.arrivals.get((FIRST_USER + s.chat, s.message_id))
        if arrived is None:
            problems.append(f"chat {s.chat} message {s.index}: no reply")
            continue
        s.latency_ms = (arrived - s.injected) * 1000
        found = MARKER.search(s.reply)
        if not found or (int(found.group(1)), int(found.group(2))) != (s.chat, s.index):
            problems.append(f"chat {s.chat} message {s.index}: wrong reply {s.reply[:80]!r}")
    ids = {(FIRST_USER + s.chat, s.message_id) for s in phase.samples}
    replies_by_chat: dict[int, list[int]] = defaultdict(list)
    for record in tg.sent:
        quoted = (record.get("reply_parameters") or {}).get("message_id")
        if (record["chat_id"], quoted) in ids:
            replies_by_chat[record["chat_id"]].append(int(MARKER.search(record["visible_text"]).group(2)))
    for chat in range(chats):
        got = replies_by_chat.get(FIRST_USER + chat, [])
        if got != list(range(messages)):
            problems.append(f"chat {chat}: replies in order {got} (want 0..{messages - 1}, each once)")
    return problems


def row(label: str, values: list[float]) -> str:
    return f"{label:<48}{percentile(values, 50):>10.1f}{percentile(values, 95):>10.1f}{max(values):>10.1f}"


def report(phase: Phase, chats: int, messages: int) -> None:
    n = len(phase.samples)
    llm_by_marker = {}
    for turn in phase.turns:
        found = MARKER.search(turn.reply)
        if found:
            llm_by_marker[(int(found.group(1)), int(found.group(2)))] = turn.timings_ms.get("llm", 0.0)
    latency = [s.latency_ms for s in phase.samples]
    minus_llm = [s.latency_ms - llm_by_marker.get((s.chat, s.index), 0.0) for s in phase.samples]
    outside = [t.timings_ms["outside_llm"] for t in phase.turns]
    llm = [t.timings_ms["llm"] for t in phase.turns]
    print(f"\n{phase.name}: {chats} chats x {messages} messages = {n} in {phase.seconds:.1f} s "
          f"-> {n / phase.seconds:.1f} messages/s")
    print(f"{'ms':<48}{'p50':>10}{'p95':>10}{'max':>10}")
    print(row("update injected -> reply at the Bot API", latency))
    print(row("  the same, minus the turn's LLM time", minus_llm))
    print(row("  agent outside the LLM (recall+prompt+capture)", outside))
    print(row("  LLM (litellm -> fake server)", llm))


async def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    tmp = tempfile.TemporaryDirectory()
    Path(tmp.name, "none.toml").write_text("")
    failures: list[str] = []
    async with FakeLLM(responder=brain.respond) as llm_server, TimedTelegram() as tg:
        env = {"MEMGATE_DATA_DIR": tmp.name, "MEMGATE_CONFIG": str(Path(tmp.name) / "none.toml"),
               "MEMGATE_LLM_API_BASE": llm_server.base_url, "MEMGATE_LLM_MODEL": "fake-model",
               "MEMGATE_LLM_API_KEY": "sk-bench", "MEMGATE_LLM_RETRIES": "0",
               "MEMGATE_ACCESS_DM_POLICY": "open", "MEMGATE_AGENT_QUEUE_SIZE": str(max(20, args.messages))}
        settings = load_settings(None, env=env)
        adapter = TelegramAdapter(tg.token, base_url=tg.base_url, poll_timeout=10)
        app = build_app(settings, channels=[adapter])
        phases = [p for p in ("closed", "burst") if args.phase in (p, "both")]
        started = time.perf_counter()
        async with app:
            # Warm up (model load, first litellm call) outside the measured phases.
            warm = tg.inject_message(FIRST_USER - 1, "hello, warming up")
            await tg.wait_until(lambda: (FIRST_USER - 1, warm["message_id"]) in tg.arrivals, 120)
            for name in phases:
                phase = Phase("closed loop" if name == "closed" else "burst")
                app.gateway.on_turn = phase.turns.append
                t0 = time.perf_counter()
                runner = closed_loop if name == "closed" else burst
                phase.samples = await runner(tg, args.chats, args.messages, args.timeout)
                phase.seconds = time.perf_counter() - t0
                await app.gateway.idle()
                problems = check(tg, phase, args.chats, args.messages)
                failures += [f"{phase.name}: {p}" for p in problems]
                report(phase, args.chats, args.messages)
                print(f"lost, doubled or out of order: {len(problems)}")
            backlog = await asyncio.to_thread(pending_count, app.store)
            calls = {m: tg.calls.count(m) for m in ("sendMessage", "sendChatAction", "getUpdates")}
            print(f"\nBot API calls: {calls}; 429s: {len(tg.rejected)}")
            print(f"ingest backlog when the last reply was out: {backlog} turns (drained on exit)")
            t_exit = time.perf_counter()
        print(f"shutdown with ingest drain: {time.perf_counter() - t_exit:.1f} s; "
              f"total {time.perf_counter() - started:.1f} s")
    tmp.cleanup()
    for problem in failures[:20]:
        print("FAIL", problem)
    print("OK: nothing lost, per-chat order kept" if not failures else f"FAILED: {len(failures)} problems")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--phase", choices=("both", "closed", "burst"), default="both")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a phase may take at most")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

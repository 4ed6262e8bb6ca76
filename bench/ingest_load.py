"""Ingest under load: many people talking at once, with a model that takes its time.

Every chat sends its next message once the previous one is answered (closed loop), through the
real gateway, agent, litellm, ingest worker pool, task processor, DuckDB and e5 embeddings; the
fake OpenAI-compatible server answers every call (reply, ingest, reconcile, task boundary) after
`--delay` seconds, like a real model. Prints reply latency, the ingest backlog over time, how
long the backlog takes to empty after the last reply, turns ingested per second and memory LLM
calls per ingested turn.

    python bench/ingest_load.py [--chats 50] [--messages 20] [--delay 1.0] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.progress import bar  # noqa: E402
from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.message import Message, Reply  # noqa: E402
from memory.ingest.capture import pending_count  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.llm_server import Delay, FakeLLM  # noqa: E402
from tests.reliability.procs import is_reply_request  # noqa: E402

TOPICS = ("my sister Ana lives in Lisbon", "I play the cello on Sundays", "my dog Pico is afraid of thunder",
          "I am learning Japanese with an app", "my favourite tea is genmaicha", "I cycle to work along the river",
          "our flat has a small balcony with tomatoes", "I am allergic to penicillin", "I run a book club on Thursdays",
          "my grandfather was a watchmaker in Geneva")


class TimedChannel(RecordingChannel):
    """The in-process channel, waking the person who waits for the answer to their message."""

    def __init__(self) -> None:
        super().__init__("console")
        self.waiters: dict[str, asyncio.Future[float]] = {}

    async def inbound_as(self, user: str, text: str, message_id: str) -> None:
        assert self._inbound is not None, "channel not started"
        await self._inbound(Message(channel=self.name, chat_id=user, sender_id=user, sender_name=user, text=text,
                                    timestamp=datetime.now(UTC), message_id=message_id))

    async def send(self, reply: Reply) -> None:
        await super().send(reply)
        waiter = self.waiters.pop(reply.reply_to or "", None)
        if waiter is not None and not waiter.done():
            waiter.set_result(time.perf_counter())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def person(channel: TimedChannel, chat: int, messages: int) -> list[float]:
    latencies = []
    for i in range(messages):
        text = f"{TOPICS[(chat + i) % len(TOPICS)]} (note {i} from person {chat})"
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[float] = loop.create_future()
        msg_id = f"p{chat}m{i}"
        channel.waiters[msg_id] = waiter
        await channel.inbound_as(f"person{chat}", text, msg_id)
        latencies.append(await asyncio.wait_for(waiter, 600) - started)
    return latencies


async def run(args: argparse.Namespace) -> int:
    calls = {"memory": 0}

    def respond(req: dict):
        if not is_reply_request(req):
            calls["memory"] += 1
        return Delay(args.delay, brain.respond(req))

    with tempfile.TemporaryDirectory(prefix="memgate-ingest-load-") as tmp:
        (Path(tmp) / "none.toml").write_text("")
        async with FakeLLM(responder=respond) as llm:
            env = {"MEMGATE_DATA_DIR": tmp, "MEMGATE_CONFIG": str(Path(tmp) / "none.toml"), "MEMGATE_LLM_API_BASE": llm.base_url,
                   "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
                   "MEMGATE_ACCESS_DM_POLICY": "open", "MEMGATE_MEMORY_INGEST_WORKERS": str(args.workers),
                   "MEMGATE_AGENT_QUEUE_SIZE": "100"}
            channel = TimedChannel()
            app = build_app(load_settings(None, env=env), channels=[channel])
            async with app:
                backlog: list[tuple[float, int]] = []
                t0 = time.perf_counter()

                shown = bar("turns ingested", args.chats * args.messages)

                async def sample() -> None:
                    while True:
                        backlog.append((time.perf_counter() - t0, await asyncio.to_thread(pending_count, app.store)))
                        shown.update(app.engine.worker.stats.turns - shown.n)
                        await asyncio.sleep(args.sample)

                sampler = asyncio.create_task(sample())
                lat = [x for xs in await asyncio.gather(*(person(channel, c, args.messages) for c in range(args.chats)))
                       for x in xs]
                last_reply = time.perf_counter() - t0
                at_last = await asyncio.to_thread(pending_count, app.store)
                turns_before = app.engine.worker.stats.turns
                memory_before = calls["memory"]
                deadline = time.perf_counter() + args.max_wait
                while await asyncio.to_thread(pending_count, app.store) and time.perf_counter() < deadline:
                    await asyncio.sleep(0.5)
                emptied = time.perf_counter() - t0
                left = await asyncio.to_thread(pending_count, app.store)
                sampler.cancel()
                shown.close()
                turns = app.engine.worker.stats.turns
                memory_calls = calls["memory"]
                by_purpose = dict(app.memory_llm.usage.calls)
        total = args.chats * args.messages
        print(f"ingest load: {args.chats} chats x {args.messages} messages, every LLM call {args.delay:g} s, "
              f"ingest_workers {args.workers}")
        print(f"{'metric':<44} {'value':>10}")
        print(f"{'replies p50 / p95 (s)':<44} {percentile(lat, 0.5):>5.2f} / {percentile(lat, 0.95):.2f}")
        print(f"{'last reply at (s)':<44} {last_reply:>10.1f}")
        print(f"{'backlog at the last reply (turns)':<44} {at_last:>10}")
        print(f"{'backlog empty after the last reply (s)':<44} {emptied - last_reply:>10.1f}"
              + ("" if not left else f"  (NOT empty: {left} left after --max-wait)"))
        print(f"{'turns ingested':<44} {turns:>10} of {total}")
        print(f"{'turns ingested per second (whole run)':<44} {turns / emptied:>10.2f}")
        print(f"{'memory LLM calls per ingested turn':<44} {memory_calls / max(turns, 1):>10.2f}")
        print(f"{'  of which after the last reply':<44} {memory_calls - memory_before:>10} calls, "
              f"{turns - turns_before} turns")
        print(f"{'  by purpose (calls per ingested turn)':<44} "
              + ", ".join(f"{p} {n / max(turns, 1):.2f}" for p, n in sorted(by_purpose.items())))
        every = max(1, len(backlog) // 12)
        print("backlog over time (s: turns): " + ", ".join(f"{t:.0f}: {n}" for t, n in backlog[::every]))
        return 0 if not left else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the fake model takes for every call")
    parser.add_argument("--workers", type=int, default=4, help="[memory] ingest_workers")
    parser.add_argument("--sample", type=float, default=2.0, help="seconds between backlog samples")
    parser.add_argument("--max-wait", type=float, default=1800.0, help="give the backlog this long after the last reply")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
